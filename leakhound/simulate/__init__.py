"""A standard-library-only simulated verifiers env worker, a target process for leakhound.

Run one with ``python -m leakhound.simulate.worker`` (``--help`` lists the options) or a
fleet of them with :func:`leakhound.simulate.fleet.start_fleet`. Modules mirror verifiers
0.1.14 so that leakhound's detectors and patches serve both:

- ``runtime``: ``Runtime`` (``trajectories``, ``register_trajectory``, ``resolve_trajectory``,
  ``submit_model_request``, ``cleanup_rollout``, ``cleanup_group``), ``serializable``,
  ``_RUNTIME_REGISTRY`` (``verifiers.v1.runtime``)
- ``interception_utils``: ``InterceptionServer.intercepts`` (``verifiers.utils``)
- ``endpoint_utils``: ``Endpoint``, ``forward_request``, ``run_intercepted_program``
  (``verifiers.v1.utils.endpoint_utils``)
- ``env``: ``Environment`` and ``Harness`` (``verifiers.v1.env`` / ``harness``)
- ``env_worker``: ``EnvWorker.stats_loop`` (``verifiers.serve.server.env_worker``)

Paths to the leaking containers in a running worker::

    leakhound.simulate.runtime._RUNTIME_REGISTRY[<runtime_id>].trajectories
    leakhound.simulate.runtime._RUNTIME_REGISTRY[<runtime_id>].harness.endpoint.server.intercepts

Nothing in this package imports anything outside the standard library, nor any of leakhound
but its two standard-library-only parts: the live patches (``leakhound.payload.patches``,
applied as ``leakhound patch`` applies them, so ``confirm`` measures the real thing) and the
fix names (``leakhound.model.names``). Nothing here calls ``gc.collect()``.
"""
