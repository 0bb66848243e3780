# Bootstrap run by the debugger's pending call on the target's main thread.
# Globals given by the caller: LH_DIR (the private directory). Standard library only.
# The main thread only checks the directory is private to this process's user and starts a
# thread; loading the payload (compiling it, if no usable .pyc came along) and all the work
# happen on that thread, so the event loop is held for about a millisecond.
import os
import stat
import sys
import threading
import time

_entered = time.perf_counter()
# The directory itself, not what a symlink of its name points at: leakhound made it root's
# and 0700, filled it, then handed it to this process's user (attach/private_dir.py).
_st = os.lstat(LH_DIR)  # noqa: F821 - provided by the caller
if not stat.S_ISDIR(_st.st_mode) or _st.st_uid not in (0, os.getuid()) or _st.st_mode & 0o077:
    raise PermissionError("leakhound: refusing a payload directory that is not private")


# A child forked while a leakhound thread imports a module must be able to import it itself
# (payload/fork_guard.py): its guard is registered before the payload's thread starts, once
# per process, under the payload's name (what an inspection leaves in sys.modules is the
# payload package; a reload of the payload keeps it).
_FORK_GUARD_NAME = "_leakhound_payload.fork_guard"
if _FORK_GUARD_NAME not in sys.modules:
    _guard_path = LH_DIR + "/payload/fork_guard.py"  # noqa: F821
    with open(_guard_path) as _fh:
        _guard = type(sys)(_FORK_GUARD_NAME)
        exec(compile(_fh.read(), _guard_path, "exec"), _guard.__dict__)
    sys.modules[_FORK_GUARD_NAME] = _guard
    _guard.register()


def _write(directory, name, text):
    path = os.path.join(directory, name)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.rename(path + ".tmp", path)


def _load(directory):
    # The payload stays loaded under one private name after its first request: loading
    # and dropping a package on every inspection would leave its module/class reference
    # cycles behind for the target's GC each time. The same version is reused; another
    # version replaces it, unless applied patches still run its code.
    name = "_leakhound_payload"
    with open(directory + "/payload/VERSION") as fh:
        version = fh.read().strip()
    loaded = sys.modules.get(name)
    if loaded is not None:
        # Half loaded: by another request of this process now, or by a parent that forked
        # this child meanwhile (its loading thread did not come along), at any point of the
        # loading, before the runner was imported too: loaded again here, none of the
        # parent's half-run submodules kept.
        loading_pid = getattr(loaded, "__payload_loading_pid__", None)
        complete = name + ".runner" in sys.modules and (
            loading_pid is None or getattr(loaded, "__payload_loaded__", False))
        if not complete and loading_pid == os.getpid():
            raise RuntimeError("another leakhound request is loading the payload in this process")
        state = sys.modules.get("_leakhound_state")
        if complete and getattr(loaded, "__payload_version__", None) == version:
            # Its modules imported later (the fixes, at the first patch request) are found in
            # this request's directory: the first one's is gone.
            loaded.__path__[:] = [directory + "/payload"]
            return sys.modules[name + ".runner"]
        if complete and getattr(state, "fixes", None):
            return sys.modules[name + ".runner"]
        for old in [n for n in sys.modules if (n == name or n.startswith(name + ".")) and n != _FORK_GUARD_NAME]:
            sys.modules.pop(old, None)
    # The import system's own functions (what importlib.util re-exports), not importlib.util:
    # that module and contextlib, which it imports, are ~0.2 MiB a target that never imported
    # them would keep (3.8-3.13 have both, in the frozen modules loaded at startup).
    external = sys.modules["_frozen_importlib_external"]
    spec = external.spec_from_file_location(
        name, directory + "/payload/__init__.py", submodule_search_locations=[directory + "/payload"]
    )
    package = sys.modules["_frozen_importlib"].module_from_spec(spec)
    package.__payload_version__ = version
    package.__payload_loading_pid__ = os.getpid()
    sys.modules[name] = package
    try:
        spec.loader.exec_module(package)
        __import__(name + ".runner")
        package.__payload_loaded__ = True
    except BaseException:
        for loaded in [n for n in sys.modules if (n == name or n.startswith(name + ".")) and n != _FORK_GUARD_NAME]:
            sys.modules.pop(loaded, None)
        raise
    return sys.modules[name + ".runner"]


def _release_pages():
    # The ptrace method's bootstrap pages (attach/ptrace/stop.py lists each in sys under
    # wire.BOOTSTRAP_PAGES, spelled out here: the payload is not imported yet): every one
    # listed was compiled before its code ran, so none is read again. Unmapped through the
    # payload's extension (_libc.c) where it loaded; ctypes (~0.3 MiB, imported on this
    # thread) only where it did not.
    pages = sys.__dict__.pop("_leakhound_pages", ())
    if not pages:
        return
    try:
        native = sys.modules.get("_leakhound_payload._walk")
        if native is not None and hasattr(native, "unmap"):
            for address, size in pages:
                native.unmap(address, size)
            return
        import ctypes

        for address, size in pages:
            ctypes.pythonapi.munmap(ctypes.c_void_p(address), ctypes.c_size_t(size))
    except Exception:
        pass


def _resident_bytes():
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _work(directory=LH_DIR):  # noqa: F821
    # Loading the payload the first time is part of what the request costs the target (~5 MB
    # of RSS): its memory budget is measured from before it.
    rss = _resident_bytes()
    kind = error = None
    if "t" in getattr(sys, "abiflags", ""):
        # A free-threaded build (3.13t): the payload reads another object header and pauses
        # under a GIL it has not. leakhound refuses one before it attaches (attach/process.py):
        # this is the last word, the payload not loaded.
        kind, error = "Unsupported", "a free-threaded CPython (%s) is not supported" % sys.version.split()[0]
    else:
        try:
            runner = _load(directory)
        except BaseException as exc:
            kind, error = "LoadError", repr(exc)
    _release_pages()
    if kind is not None:
        import json

        try:
            _write(directory, "result.json", json.dumps({"ok": False, "kind": kind, "error": error}))
        except OSError:
            pass
        return
    runner.set_rss_at_boot(rss)
    try:
        runner.run_from_dir(directory)
    finally:
        # This bootstrap's functions and its globals dict reference each other: clear the
        # dict once the main thread is done with it, so nothing is left for the target's GC.
        _main_done.wait(5.0)
        globals().clear()


_main_done = threading.Event()
try:
    threading.Thread(target=_work, name="leakhound-payload", daemon=True).start()
    _no_thread = None
except RuntimeError as _exc:
    # 3.12 starts no thread once the main thread has run its script to the end and waits
    # for the others (threading._shutdown: "can't create new thread at interpreter
    # shutdown"). Said at once, not as a safe point never reached.
    _no_thread = str(_exc)
try:
    if _no_thread is not None:
        import json as _json

        _write(LH_DIR, "result.json", _json.dumps({"ok": False, "kind": "NoThread", "error": _no_thread}))  # noqa: F821
    _write(LH_DIR, "started.json", '{"main_thread_ms": %.3f}' % ((time.perf_counter() - _entered) * 1000.0))  # noqa: F821
finally:
    _main_done.set()
if _no_thread is not None:
    # No payload thread to clear this dict (nothing left for the target's GC), nor to take
    # the ptrace method's bootstrap pages back: raised, the bootstrap does (channel.py).
    globals().clear()
    raise RuntimeError("leakhound: no thread for the payload")
