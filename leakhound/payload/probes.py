"""Known-shape probes: facts about recognised structures (e.g. the verifiers v1 runtime).

Each probe returns a JSON-able dict, or ``{"skipped": reason}`` when the shape is absent.
Detectors on the CLI side turn these facts into findings.
"""


def run_all():
    return {}
