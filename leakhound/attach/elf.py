"""Just enough of an ELF64 reader for the ptrace injector (standard library only).

It reads a mapped object's program headers and its symbol tables (``.dynsym``, and ``.symtab``
when the file was not stripped), and the bytes at a link-time address, so every address the
injector needs is known before the target is stopped.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from typing import BinaryIO

EM_X86_64 = 62
ET_EXEC = 2
ET_DYN = 3
PT_LOAD = 1
SHT_SYMTAB = 2
SHT_DYNSYM = 11
STT_FUNC = 2
STT_GNU_IFUNC = 10

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")


class ElfError(Exception):
    """The file is not an ELF object this reader understands."""


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int  # link-time address; add the load bias for the address in a process
    size: int


@dataclass(frozen=True)
class Segment:
    vaddr: int
    offset: int
    filesz: int
    memsz: int


class ElfFile:
    """Header, loadable segments and function symbols of one ELF64 little-endian file."""

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "rb") as fh:
            head = fh.read(_EHDR.size)
            if len(head) < _EHDR.size or head[:4] != b"\x7fELF":
                raise ElfError(f"{path} is not an ELF file")
            if head[4] != 2 or head[5] != 1:
                raise ElfError(f"{path} is not a 64-bit little-endian ELF file")
            (_, self.type, self.machine, _, _, phoff, shoff, _, _, phentsize, phnum,
             shentsize, shnum, _) = _EHDR.unpack(head)
            self.segments = self._segments(fh, phoff, phentsize, phnum)
            self.functions = self._functions(fh, shoff, shentsize, shnum)
        # Function start addresses in order, to bound unnamed code by the next named one.
        self.starts = sorted({s.value for s in self.functions.values()})

    @staticmethod
    def _segments(fh: BinaryIO, phoff: int, size: int, count: int) -> tuple[Segment, ...]:
        fh.seek(phoff)
        table = fh.read(size * count)
        found = []
        for i in range(count):
            p_type, _, offset, vaddr, _, filesz, memsz, _ = _PHDR.unpack_from(table, i * size)
            if p_type == PT_LOAD:
                found.append(Segment(vaddr=vaddr, offset=offset, filesz=filesz, memsz=memsz))
        if not found:
            raise ElfError("no loadable segment")
        return tuple(found)

    @staticmethod
    def _functions(fh: BinaryIO, shoff: int, size: int, count: int) -> dict[str, Symbol]:
        if not shoff or not count:
            return {}
        fh.seek(shoff)
        table = fh.read(size * count)
        sections = [_SHDR.unpack_from(table, i * size) for i in range(count)]
        found: dict[str, Symbol] = {}
        # .dynsym last, so an exported name wins over a local one of the same name.
        for wanted in (SHT_SYMTAB, SHT_DYNSYM):
            for _, sh_type, _, _, offset, length, link, _, _, entsize in sections:
                if sh_type != wanted or entsize != _SYM.size or link >= len(sections):
                    continue
                str_offset, str_length = sections[link][4], sections[link][5]
                fh.seek(str_offset)
                names = fh.read(str_length)
                fh.seek(offset)
                data = fh.read(length)
                for st_name, info, _, shndx, value, sym_size in _SYM.iter_unpack(data):
                    if info & 0xF not in (STT_FUNC, STT_GNU_IFUNC) or not value or shndx == 0:
                        continue
                    end = names.find(b"\0", st_name)
                    name = names[st_name:end].decode("ascii", "replace").split("@", 1)[0]
                    found[name] = Symbol(name=name, value=value, size=sym_size)
        return found

    def file_offset(self, vaddr: int) -> int | None:
        for seg in self.segments:
            if seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
                return vaddr - seg.vaddr + seg.offset
        return None

    def read(self, vaddr: int, length: int) -> bytes:
        """The file's bytes at a link-time address (code and read-only data)."""
        offset = self.file_offset(vaddr)
        if offset is None:
            raise ElfError(f"address {vaddr:#x} is not in a loadable segment of {self.path}")
        with open(self.path, "rb") as fh:
            fh.seek(offset)
            return fh.read(length)

    def load_bias(self, map_start: int, map_offset: int) -> int:
        """What to add to link-time addresses, given one mapping of the file (start, offset)."""
        if self.type == ET_EXEC:
            return 0
        page = 0x1000
        for seg in self.segments:
            if seg.offset & ~(page - 1) == map_offset:
                return map_start - (seg.vaddr & ~(page - 1))
        raise ElfError(f"no segment of {self.path} is mapped at file offset {map_offset:#x}")

    def end_of(self, symbol: Symbol) -> int:
        """Where a function ends: its size, or the next known function for unsized ones."""
        if symbol.size:
            return symbol.value + symbol.size
        return self.next_start(symbol.value)

    def next_start(self, address: int, *, limit: int = 0x1000) -> int:
        """The next named function after ``address`` (at most ``limit`` bytes on)."""
        i = bisect.bisect_right(self.starts, address)
        nxt = self.starts[i] if i < len(self.starts) else address + limit
        return min(nxt, address + limit)
