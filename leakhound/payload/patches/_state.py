"""Where applied fixes keep their state in the target: one module, ``_leakhound_state``.

Both ways in (the debugger-loaded ``_leakhound_payload`` and the agent's
``leakhound.payload``) share it, so a fix applied through one can be listed and reverted
through the other. Each entry keeps what revert needs to restore the original exactly.
"""

import sys
import types

STATE_MODULE = "_leakhound_state"


def state():
    mod = sys.modules.get(STATE_MODULE)
    if mod is None:
        mod = types.ModuleType(STATE_MODULE, "leakhound: live fixes applied in this process")
        mod.fixes = {}  # type: ignore[attr-defined]
        sys.modules[STATE_MODULE] = mod
    return mod.fixes


def peek():
    mod = sys.modules.get(STATE_MODULE)
    return getattr(mod, "fixes", {}) if mod is not None else {}


def drop_if_empty():
    if not peek():
        sys.modules.pop(STATE_MODULE, None)


class Swap(object):
    """One replaced attribute: ``owner.name`` was ``original`` (or absent) and is now ``new``."""

    def __init__(self, owner, name, new):
        self.owner = owner
        self.name = name
        self.new = new
        self.had = name in _namespace(owner)
        self.original = _namespace(owner).get(name)

    def apply(self):
        setattr(self.owner, self.name, self.new)

    def revert(self):
        if _namespace(self.owner).get(self.name) is not self.new:
            return False  # someone else replaced it since; leave their code alone
        if self.had:
            setattr(self.owner, self.name, self.original)
        else:
            delattr(self.owner, self.name)
        return True


def _namespace(owner):
    if isinstance(owner, type):
        return type.__dict__["__dict__"].__get__(owner, type)
    return vars(owner)
