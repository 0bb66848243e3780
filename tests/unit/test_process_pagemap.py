"""The target's stack, file-backed and unique bytes read from /proc/PID/pagemap (no smaps walk,
which stalls the target's mmap/munmap: attach/process.py) agree with what smaps says."""

from __future__ import annotations

import os
import struct
import tempfile

import pytest

from leakhound.attach import process

PAGE = os.sysconf("SC_PAGE_SIZE")
PRESENT = 1 << 63
EXCLUSIVE = 1 << 56
SWAPPED = 1 << 62


def test_page_counts_reads_the_top_byte_of_each_entry() -> None:
    entries = [PRESENT | EXCLUSIVE | 1234, PRESENT | 99, 0, SWAPPED | EXCLUSIVE, PRESENT | EXCLUSIVE, EXCLUSIVE]
    with tempfile.TemporaryFile() as fh:
        fh.write(struct.pack(f"<{len(entries)}Q", *entries))
        fh.flush()
        fd = fh.fileno()
        assert process.page_counts(fd, 0, len(entries) * PAGE) == (3, 2)
        # a range inside the file: entries 1..3
        assert process.page_counts(fd, PAGE, 4 * PAGE) == (1, 0)


def test_page_counts_reads_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = [PRESENT | EXCLUSIVE] * 1000 + [PRESENT] * 24
    with tempfile.TemporaryFile() as fh:
        fh.write(struct.pack(f"<{len(entries)}Q", *entries))
        fh.flush()
        monkeypatch.setattr(process, "_PAGEMAP_CHUNK", 64)
        assert process.page_counts(fh.fileno(), 0, len(entries) * PAGE) == (1024, 1000)


def _smaps(pid: int) -> tuple[int, int, int]:
    """(stacks, file-backed, private) resident bytes from /proc/PID/smaps, as it used to be read."""
    pointers = process._stack_pointers(pid)
    stacks = files = private = 0
    low = high = 0
    path = ""
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            head = line.split(None, 5)
            if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                start, _, end = head[0].partition("-")
                low, high = int(start, 16), int(end, 16)
                path = head[5].strip() if len(head) > 5 else ""
            elif head and head[0] == "Rss:":
                rss = int(head[1]) * 1024
                if path == "[stack]" or any(low <= sp < high for sp in pointers):
                    stacks += rss
                elif path.startswith("/"):
                    files += rss
            elif head and head[0] in ("Private_Clean:", "Private_Dirty:"):
                private += int(head[1]) * 1024
    return stacks, files, private


def test_mapped_bytes_agrees_with_smaps() -> None:
    pid = os.getpid()
    old_stacks, old_files, old_private = _smaps(pid)
    stacks, files, uss = process.mapped_bytes(pid)
    # read one after the other in a running process: a few pages may differ
    assert abs(stacks - old_stacks) <= 4 * PAGE
    assert abs(files - old_files) <= 64 * PAGE
    assert abs(uss - old_private) <= max(256 * PAGE, old_private // 100)


def test_mapped_bytes_of_no_process_is_zero() -> None:
    assert process.mapped_bytes(2**22 + 12345) == (0, 0, 0)
