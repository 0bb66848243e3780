"""The private directory's files, reached only through a descriptor of the directory itself.

Root (the CLI, the ptrace helper) works in a directory that a process of the target's user
may write into once it is handed over: any name in it can become a symlink, a FIFO or a hard
link at any moment. So nothing there is reached by path (standard library only: the ptrace
helper imports this module):

- the directory is made with a random name relative to a descriptor of its parent, opened
  ``O_DIRECTORY|O_NOFOLLOW`` and checked (a directory, ours, 0700); every later operation is
  relative to that descriptor;
- a file is created ``O_CREAT|O_EXCL|O_NOFOLLOW`` and its owner and mode set on the
  descriptor; a file is replaced by a fresh random name renamed over it;
- a file is read ``O_NOFOLLOW|O_NONBLOCK`` and only if it is a regular file with one link and
  no bigger than the bound its reader gives (a FIFO never blocks, a link never redirects);
- removal unlinks through the descriptors, never following a symlink, and removes the
  directory's entry in its parent only if it is still the directory that was made.

A target with its own mount namespace gets the directory in its own filesystem: the parent
is resolved under ``/proc/PID/root`` without following any symlink (``openat2`` with
``RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS``, else a walk one component at a time).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Mapping

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
PREFIX = "leakhound-"
# Removal goes this deep and this wide at most: the payload's tree is 3 levels and ~100
# entries; more was planted, and what is beyond the bounds is left.
_MAX_DEPTH = 16
_MAX_ENTRIES = 100_000


# An entry opened just as the payload renamed a new one over it has no link left: opened again
# at most this many times (then it counts as not there yet: the reader polls again).
REPLACED_RETRIES = 4


class UnsafeEntry(OSError):
    """An entry of the private directory that is not what leakhound wrote or waits for: a
    symlink, a FIFO, a device, a hard link, bigger than its bound, or the directory itself
    replaced. Someone else (a process of the target's user) put it there."""


def random_name(stem: str) -> str:
    return f"{stem}.{secrets.token_hex(8)}"


class PrivateDir:
    """The directory as a descriptor (``fd``), its parent's descriptor and its name there,
    and its identity (``dev``, ``ino``)."""

    def __init__(self, parent_fd: int, name: str, fd: int) -> None:
        self.parent_fd = parent_fd
        self.name = name
        self.fd = fd
        st = os.fstat(fd)
        self.dev, self.ino = st.st_dev, st.st_ino

    # -- making and adopting --------------------------------------------------------------

    @classmethod
    def make(cls, parent_fd: int) -> PrivateDir:
        """A new directory ``leakhound-<our pid>-<random>`` in the directory ``parent_fd``
        (which it takes over, and closes if it fails), owned by us, mode 0700."""
        try:
            return cls(parent_fd, *_make_in(parent_fd))
        except BaseException:
            os.close(parent_fd)
            raise

    @classmethod
    def adopt(cls, parent_fd: int, fd: int, name: str, dev: int, ino: int) -> PrivateDir:
        """The directory another process made and handed over as descriptors (the ptrace
        helper's, inherited): refused unless ``fd`` is the directory (``dev``, ``ino``)."""
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != (dev, ino):
            raise UnsafeEntry(errno.EPERM, f"descriptor {fd} is not the private directory {name}")
        return cls(parent_fd, name, fd)

    def hand_over(self, uid: int) -> None:
        """Make the directory the target's user's (it must open it), 0700: called once it is
        filled, so nothing could be planted while root wrote into it."""
        if os.geteuid() == 0 and uid not in (0, -1):
            os.fchown(self.fd, uid, -1)
        os.fchmod(self.fd, 0o700)

    # -- writing ----------------------------------------------------------------------------

    def create(self, name: str, data: bytes, *, uid: int = -1, mode: int = 0o600,
               mtime_ns: int | None = None, dir_fd: int | None = None) -> None:
        """A new file ``name`` holding ``data``; fails (``FileExistsError``) if anything of
        that name is there, a symlink included."""
        where = self.fd if dir_fd is None else dir_fd
        fd = os.open(name, CREATE_FLAGS, 0o600, dir_fd=where)
        try:
            if uid != -1 and os.geteuid() == 0:
                os.fchown(fd, uid, -1)
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if mtime_ns is not None:
                os.utime(fd, ns=(mtime_ns, mtime_ns))
        finally:
            os.close(fd)

    def replace(self, name: str, data: bytes, *, uid: int = -1) -> None:
        """``name`` replaced whole (a reader never sees half of it): written under a fresh
        random name, renamed over it."""
        tmp = random_name(name)
        self.create(tmp, data, uid=uid)
        try:
            os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError:
            _unlink_quietly(tmp, self.fd)
            raise

    def touch(self, name: str) -> bool:
        """An empty ``name`` created if nothing of that name is there; whether it was."""
        try:
            self.create(name, b"")
        except FileExistsError:
            return False
        return True

    def mkdir(self, name: str, *, uid: int = -1, dir_fd: int | None = None) -> int:
        """A subdirectory, created and opened (its descriptor, for the caller to close)."""
        where = self.fd if dir_fd is None else dir_fd
        os.mkdir(name, 0o700, dir_fd=where)
        fd = os.open(name, DIR_FLAGS, dir_fd=where)
        try:
            if uid != -1 and os.geteuid() == 0:
                os.fchown(fd, uid, -1)
            os.fchmod(fd, 0o755)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def copy_tree(self, source: str, name: str, *, uid: int = -1, skip: tuple[str, ...] = (),
                  files: Mapping[str, bytes] | None = None) -> None:
        """``source`` (a directory of leakhound's own) copied as ``name``, file times kept
        (compiled .pyc files stay valid); names starting with one of ``skip`` are left out.
        ``files``: paths relative to ``source`` (``__pycache__/x.cpython-311.pyc``) written
        with these bytes, in place of what ``source`` has there or beside it."""
        self._copy_into(source, name, self.fd, uid, skip, dict(files or {}))

    def _copy_into(self, source: str | None, name: str, parent: int, uid: int, skip: tuple[str, ...],
                   files: dict[str, bytes]) -> None:
        fd = self.mkdir(name, uid=uid, dir_fd=parent)
        try:
            entries = sorted(os.scandir(source), key=lambda e: e.name) if source is not None else []
            subdirs = {rel.split("/", 1)[0] for rel in files if "/" in rel}
            for entry in entries:
                if entry.name.startswith(skip):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    subdirs.discard(entry.name)
                    self._copy_into(entry.path, entry.name, fd, uid, skip, _under(files, entry.name))
                elif entry.is_file(follow_symlinks=False):
                    if entry.name in files:
                        continue  # written below
                    with open(entry.path, "rb") as fh:
                        data = fh.read()
                    st = entry.stat(follow_symlinks=False)
                    self.create(entry.name, data, uid=uid, mode=0o644, mtime_ns=st.st_mtime_ns, dir_fd=fd)
            for rel, data in files.items():
                if "/" not in rel:
                    self.create(rel, data, uid=uid, mode=0o644, dir_fd=fd)
            for sub in sorted(subdirs):  # not in source: made for its files
                self._copy_into(None, sub, fd, uid, skip, _under(files, sub))
        finally:
            os.close(fd)

    # -- reading ----------------------------------------------------------------------------

    def open_regular(self, name: str, limit: int, *, writable: bool = False) -> int | None:
        """``name`` opened for reading (a descriptor for the caller to close), or None when
        there is no such entry. ``UnsafeEntry`` unless it is a regular file with one link of
        at most ``limit`` bytes. ``writable``: read-write (punching holes needs it)."""
        flags = (READ_FLAGS & ~os.O_RDONLY) | os.O_RDWR if writable else READ_FLAGS
        for _ in range(REPLACED_RETRIES):
            try:
                fd = os.open(name, flags, dir_fd=self.fd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise UnsafeEntry(errno.ELOOP, f"{name} in the private directory is a symbolic link") from None
                raise
            try:
                st = os.fstat(fd)
            except BaseException:
                os.close(fd)
                raise
            if st.st_nlink != 0:
                break
            # Replaced (or removed) between the open and the look: the payload writes its
            # documents to a new name and renames it over the old one. Again, at the new one.
            # One look decides (a second could meet the next rename).
            os.close(fd)
        else:
            return None
        try:
            if not stat.S_ISREG(st.st_mode):
                raise UnsafeEntry(errno.EINVAL, f"{name} in the private directory is not a regular file "
                                                f"({_kind(st.st_mode)})")
            if st.st_nlink != 1:
                raise UnsafeEntry(errno.EMLINK, f"{name} in the private directory has {st.st_nlink} links")
            if st.st_size > limit:
                raise UnsafeEntry(errno.EFBIG, f"{name} in the private directory holds {st.st_size} bytes, "
                                               f"more than the {limit} it may")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read(self, name: str, limit: int) -> bytes | None:
        """All of ``name`` (None if there is none), under the rules of ``open_regular``."""
        fd = self.open_regular(name, limit)
        if fd is None:
            return None
        try:
            data = read_bounded(fd, limit, name)
        finally:
            os.close(fd)
        return data

    def exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    # -- removing ---------------------------------------------------------------------------

    def is_in_place(self) -> bool:
        """Whether the parent's entry of our name is still this directory."""
        try:
            st = os.stat(self.name, dir_fd=self.parent_fd, follow_symlinks=False)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (self.dev, self.ino)

    def remove(self) -> bool:
        """Everything in the directory unlinked through its descriptor, then its entry in the
        parent removed if it is still this directory; whether that entry is gone (or was not
        ours any more)."""
        budget = [_MAX_ENTRIES]
        try:
            clear(self.fd, 0, budget)
        except OSError:
            pass
        if not self.is_in_place():
            return True
        try:
            os.rmdir(self.name, dir_fd=self.parent_fd)
        except OSError:
            return not self.is_in_place()
        return True

    def close(self) -> None:
        """Both descriptors closed (nothing removed)."""
        for fd in (self.fd, self.parent_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.fd = self.parent_fd = -1


def _make_in(parent_fd: int) -> tuple[str, int]:
    """(name, descriptor) of a new directory of ours, 0700, in ``parent_fd``."""
    for _ in range(100):
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
        except FileExistsError:
            continue
        break
    else:
        raise FileExistsError(errno.EEXIST, "no free name for the private directory")
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        _rmdir_quietly(name, parent_fd)
        raise
    try:
        os.fchmod(fd, 0o700)  # (the umask may have taken bits away; never adds any)
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) != 0o700:
            raise UnsafeEntry(errno.EPERM, f"the private directory {name} is not ours and 0700")
    except BaseException:
        os.close(fd)
        _rmdir_quietly(name, parent_fd)
        raise
    return name, fd


def read_bounded(fd: int, limit: int, name: str) -> bytes:
    """At most ``limit`` bytes from ``fd``; ``UnsafeEntry`` if there are more (it grew)."""
    chunks = []
    total = 0
    while True:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            break
        total += len(chunk)
        chunks.append(chunk)
        if total > limit:
            raise UnsafeEntry(errno.EFBIG, f"{name} in the private directory grew past the {limit} bytes it may hold")
    return b"".join(chunks)


def clear(fd: int, depth: int, budget: list[int]) -> None:
    """Unlink everything in the directory ``fd``, never following a symlink (a subdirectory
    is opened ``O_NOFOLLOW``, so one swapped for a link is unlinked as a link)."""
    for name in os.listdir(fd):
        budget[0] -= 1
        if budget[0] < 0:
            return
        try:
            os.unlink(name, dir_fd=fd)
            continue
        except FileNotFoundError:
            continue
        except OSError as exc:
            if exc.errno not in (errno.EISDIR, errno.EPERM) or depth >= _MAX_DEPTH:
                continue
        try:
            sub = os.open(name, DIR_FLAGS, dir_fd=fd)
        except OSError:
            continue
        try:
            clear(sub, depth + 1, budget)
        finally:
            os.close(sub)
        try:
            os.rmdir(name, dir_fd=fd)
        except OSError:
            pass


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "not a file"


def _rmdir_quietly(name: str, parent_fd: int) -> None:
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except OSError:
        pass


def _unlink_quietly(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


# -- a directory inside another process's root --------------------------------------------------

_SYS_OPENAT2 = 437  # x86-64 and the generic table alike
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_IN_ROOT = 0x10


def open_dir_in_root(root: str, path: str) -> int:
    """The directory ``path`` as the process whose root is ``root`` (``/proc/PID/root``)
    sees it, opened for ``*at`` calls. No symlink is followed and ``..`` never leaves that
    root: ``UnsafeEntry`` for a path through a symlink."""
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _openat2(root_fd, path)
        return fd if fd is not None else _walk(root_fd, path)
    finally:
        os.close(root_fd)


def _openat2(root_fd: int, path: str) -> int | None:
    """``openat2`` where the kernel has it (5.6+); None where it does not."""
    import ctypes  # noqa: PLC0415 - only here: the ptrace helper never resolves a root

    class OpenHow(ctypes.Structure):
        _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))

    libc = ctypes.CDLL(None, use_errno=True)
    how = OpenHow(os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, 0,
                  _RESOLVE_IN_ROOT | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
    fd = libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(root_fd), ctypes.c_char_p(os.fsencode(path)),
                      ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd >= 0:
        return int(fd)
    err = ctypes.get_errno()
    if err == errno.ENOSYS:
        return None  # (seccomp filters of some sandboxes answer ENOSYS too)
    if err == errno.ELOOP:
        raise UnsafeEntry(errno.ELOOP, f"{path} goes through a symbolic link")
    raise OSError(err, os.strerror(err), path)


def _walk(root_fd: int, path: str) -> int:
    """``path`` one component at a time, each ``O_PATH|O_DIRECTORY|O_NOFOLLOW``; ``..`` is
    refused (it could climb out of the root)."""
    cur = os.dup(root_fd)
    try:
        for part in path.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                raise UnsafeEntry(errno.EPERM, f"{path} has a '..' component")
            try:
                nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cur)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, cur):
                    raise UnsafeEntry(errno.ELOOP, f"{path} goes through a symbolic link ({part})") from None
                raise
            os.close(cur)
            cur = nxt
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=cur)
    finally:
        os.close(cur)


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _under(files: dict[str, bytes], name: str) -> dict[str, bytes]:
    """The entries of ``files`` inside directory ``name``, relative to it."""
    prefix = name + "/"
    return {rel[len(prefix):]: data for rel, data in files.items() if rel.startswith(prefix)}
