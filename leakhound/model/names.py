"""The closed sets leakhound names things by, one spelling each, from the CLI flag to the JSON.

Standard library only and importable by every layer (the simulated worker included): the
fixes, how to get into a target, what a patch request does, and the special owners. The
payload keeps its own copy of the special owner's name (it imports nothing of leakhound);
tests hold the two equal.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Iterable


class Name(str, enum.Enum):
    """A closed set's member, said as its value (``--method ptrace``, ``"ptrace"`` in the JSON)."""

    def __str__(self) -> str:
        return str(self.value)


class Fix(Name):
    """A built-in live fix, named as ``--fix`` takes it, its detector names it and its metric label."""

    STEPS = "steps"
    REGISTRY = "registry"
    INTERCEPTS = "intercepts"
    TRIM = "trim"


#: Every fix, in the order they are applied and shown.
FIX_NAMES: tuple[str, ...] = tuple(f.value for f in Fix)

#: Finding kinds of snapshots written before a detector was named as the fix it recommends;
#: the snapshot loader reads them as today's names, so old and new files diff.
OLD_FINDING_KINDS: dict[str, str] = {
    "trajectory_registry": Fix.REGISTRY.value,
    "intercept_bodies": Fix.INTERCEPTS.value,
    "step_bloat": Fix.STEPS.value,
}


def parse_fixes(text: str, *, allow_none: bool = False, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """``all``, a comma list of fix names (``steps,trim``), or with ``allow_none`` ``none``;
    canonical order, no repeats. ``extra`` names are accepted beside the fixes (never part of
    ``all``). Raises ValueError naming what is unknown, the choice each is close to (a typo:
    ``regsitry``), and what may be chosen."""
    known = (*FIX_NAMES, *extra)
    typed = {part.strip().lower().replace("-", "_"): part.strip() for part in text.split(",") if part.strip()}
    names = set(typed)
    if allow_none and names <= {"none"}:
        return ()
    if "all" in names:
        names = (names - {"all"}) | set(FIX_NAMES)
    unknown = sorted(names - set(known))
    if unknown or not names:
        options = ("none", "all", *known) if allow_none else ("all", *known)
        meant = [close[0] for name in unknown if (close := difflib.get_close_matches(name, options, n=1))]
        guess = f"; did you mean {', '.join(meant)}?" if len(meant) == len(unknown) and meant else ""
        said = ", ".join(typed[name] for name in unknown) or "(none)"
        raise ValueError(f"unknown fix {said}{guess} (choose from {', '.join(options)})")
    return tuple(name for name in known if name in names)


class Method(Name):
    """How to get into the target (``--method``); ``auto`` tries them in attach's order."""

    AUTO = "auto"
    AGENT = "agent"
    PTRACE = "ptrace"
    GDB = "gdb"
    REMOTE_EXEC = "remote-exec"


METHOD_NAMES: tuple[str, ...] = tuple(m.value for m in Method)


class PatchAction(Name):
    """What a patch request does to the named fixes."""

    APPLY = "apply"
    REVERT = "revert"
    STATUS = "status"
    DRY_RUN = "dry-run"


#: The owner the census books module objects, their dicts, classes and code under: the
#: program's code, not a leak. The payload spells it in ``payload/census_roots.py``.
CODE_OWNER = "<modules and classes>"

#: The owner of what the loaded payload itself holds (its modules' functions, classes, code),
#: by both owner models; the payload spells it in ``payload/census_roots.py``.
PAYLOAD_OWNER = "<leakhound payload>"
#: The last step of a class's registry of its subclasses (``object.<subclasses>``: a C field of
#: the class, shown by no traversal; the payload spells it in ``payload/objects.py``
#: SUBCLASSES_LABEL). It grows with the classes made, whoever keeps them.
SUBCLASSES_STEP = ".<subclasses>"
#: The package the payload is loaded under in a target (``payload/boot.py``).
PAYLOAD_PACKAGE = "_leakhound_payload"


class Owners(Name):
    """How owners are to be found: ``--owners``, the request. What a snapshot says it got is
    an ``OwnerModel`` (``heap.owner_model``, the result); ``OWNER_MODELS_OF`` maps one to the
    other, and the CLI's help and the JSON both say these words:

    ==============  ===============================================================
    ``--owners``    ``heap.owner_model`` of the snapshot
    ==============  ===============================================================
    ``auto``        ``dominator``, or ``not-attributed`` past the graph's budgets
    ``dominator``   ``dominator``, or ``not-attributed`` past the node budget or the
                    memory limit (no memory budget of its own)
    ``census``      ``first-reacher``: the census's owners, no object graph
    ==============  ===============================================================
    """

    AUTO = "auto"
    DOMINATOR = "dominator"
    CENSUS = "census"


OWNERS_NAMES: tuple[str, ...] = tuple(o.value for o in Owners)


class OwnerModel(Name):
    """How a snapshot's owners were found (``heap.owner_model``); ``Owners`` is what was asked."""

    #: the dominator tree: retained = what freeing the owner returns
    DOMINATOR = "dominator"
    #: the census: each object under the first named root that reaches it (``--owners census``)
    FIRST_REACHER = "first-reacher"
    #: dominators were asked for and could not be computed: no owner is named, the heap's
    #: bytes are one ``<not attributed: ...>`` owner (``heap.owner_model_reason`` says why)
    NOT_ATTRIBUTED = "not-attributed"


#: What each ``--owners`` choice can give a snapshot (``Owners``' docstring says when).
OWNER_MODELS_OF: dict[Owners, tuple[OwnerModel, ...]] = {
    Owners.AUTO: (OwnerModel.DOMINATOR, OwnerModel.NOT_ATTRIBUTED),
    Owners.DOMINATOR: (OwnerModel.DOMINATOR, OwnerModel.NOT_ATTRIBUTED),
    Owners.CENSUS: (OwnerModel.FIRST_REACHER,),
}


class NotAttributed(Name):
    """Why owners could not be computed (``heap.owner_model_reason``); the payload's graph
    says the same codes (``skipped_code``, payload/graph.py)."""

    #: the object graph has more nodes than the graph budget (LEAKHOUND_MAX_GRAPH_NODES)
    GRAPH_OVER_NODES = "graph_over_nodes"
    #: its walk would hold more than its own memory budget in the target (``--owners auto``:
    #: a quarter of the worker's RSS, at most 256 MiB)
    GRAPH_OVER_MEMORY_BUDGET = "graph_over_memory_budget"
    #: no room for its walk under the worker's memory limit (the request's memory budget)
    GRAPH_NO_HEADROOM = "graph_no_headroom"
    #: its walk did not finish within its share of the request's time
    GRAPH_OUT_OF_TIME = "graph_out_of_time"
    #: the target sent no object graph, or did not say why
    NO_GRAPH = "no_graph"


#: How the bytes of a heap whose owners could not be computed are named: one owner, never a
#: first reacher presented as an owner (``<not attributed: graph over 6,000,000 nodes>``).
NOT_ATTRIBUTED_PREFIX = "<not attributed: "


#: How the objects of one type made while the graph was walked, after what holds them had been
#: walked, are named (payload/graph_roots.py): ``<made during the walk: logging.LogRecord>``.
#: Their bytes follow the walk's length and the target's allocation rate, not an owner.
MADE_DURING_WALK_PREFIX = "<made during the walk: "

#: Owners the dominator owners make of roots alike (analysis/dominators/owners.py
#: ``_alike_roots``), no object of the target: ``task:Task-*/CORO`` (the tasks running a
#: coroutine), ``thread:Thread-* (serve)/FUNC`` (the threads named so), ``plugin_*`` (the
#: modules named so but for numbers); ``*`` stands for what was numbered. (The payload's cheap
#: samples read the same grammar back: payload/sampling.py ``_ROOTS_ALIKE``.)
# atexit's callbacks, one owner (payload/roots.py's ATEXIT_OWNER): no object of the target,
# counted in cheap samples by atexit._ncallbacks() (payload/sampling.py atexit_items)
ATEXIT_OWNER = "atexit.<callbacks>"
ROOTS_ALIKE = re.compile(r"^(?:(?P<kind>task|thread):(?P<name>[^/]*\*[^/]*)/(?P<what>[^/ .\[<(]+)"
                         r"|(?P<modules>[\w.]*\*[\w.*]*))$")


def not_attributed_owner(reason: NotAttributed, max_nodes: int = 0) -> str:
    """The owner name of a heap's unattributed bytes, for ``reason``."""
    what = {
        NotAttributed.GRAPH_OVER_NODES: f"graph over {max_nodes:,} nodes" if max_nodes else "graph over its budget",
        NotAttributed.GRAPH_OVER_MEMORY_BUDGET: "graph over its memory budget",
        NotAttributed.GRAPH_NO_HEADROOM: "no room for the graph under the memory limit",
        NotAttributed.GRAPH_OUT_OF_TIME: "graph out of time",
        NotAttributed.NO_GRAPH: "no object graph",
    }[reason]
    return f"{NOT_ATTRIBUTED_PREFIX}{what}>"


class EndedHow(str, enum.Enum):
    """How a watched or exported target ended: the ``how`` of watch's JSON and export's metric."""

    OOM_KILLED = "oom_killed"
    SIGNAL = "signal"
    EXITED = "exited"
    UNKNOWN = "unknown"
