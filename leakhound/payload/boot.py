# Bootstrap run by the debugger's pending call on the target's main thread.
# Globals given by the caller: LH_DIR (the private directory). Standard library only.
# It checks the directory is private to this process's user before loading anything from it,
# loads the payload package under a private name (or reuses the one already loaded, which
# holds the state of applied patches), and hands over to runner.start_from_dir.
import os
import sys
import time

_entered = time.perf_counter()
_st = os.stat(LH_DIR)  # noqa: F821 - provided by the caller
if _st.st_uid not in (0, os.getuid()) or _st.st_mode & 0o077:
    raise PermissionError("leakhound: refusing a payload directory that is not private")
_name = "_leakhound_payload"
if _name not in sys.modules:
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        _name,
        LH_DIR + "/payload/__init__.py",  # noqa: F821
        submodule_search_locations=[LH_DIR + "/payload"],  # noqa: F821
    )
    _pkg = importlib.util.module_from_spec(_spec)
    sys.modules[_name] = _pkg
    try:
        _spec.loader.exec_module(_pkg)
        __import__(_name + ".runner")
    except BaseException:
        sys.modules.pop(_name, None)
        raise
sys.modules[_name + ".runner"].start_from_dir(LH_DIR, _entered)  # noqa: F821
