"""The census's bookkeeping: marks of claimed objects, count/byte tallies in ``array`` storage,
and the exceptions that stop a census (its clock is pacing.Clock). Standard library only.
"""

import array
import sys

_REGION_SHIFT = 20  # 1 MiB of address space per bitmap region
_REGION_BYTES = 1 << (_REGION_SHIFT - 4 - 3)  # one bit per 16-byte granule: 8 KiB


class CensusTimeout(Exception):
    pass


class CensusCancelled(Exception):
    """The caller asked the census to stop (``Census(cancelled=...)`` returned True)."""



class Marks(object):
    """The set of objects already claimed, as one bit per 16-byte address granule.

    Every CPython object is 16-byte aligned and at least 16 bytes long, so an address
    names one granule. A bitmap of ``bytearray`` regions is not a GC-tracked container
    and costs 1 bit per 16 bytes of heap instead of ~60 bytes per object for a set of
    ids; the hot loop in ``ClaimWalk.claim_tree`` inlines the same arithmetic.
    """

    __slots__ = ("regions",)

    def __init__(self):
        self.regions = {}

    def add(self, address):
        region = self.regions.get(address >> _REGION_SHIFT)
        if region is None:
            region = self.regions[address >> _REGION_SHIFT] = bytearray(_REGION_BYTES)
        region[(address & 0xFFFFF) >> 7] |= 1 << ((address >> 4) & 7)

    def __contains__(self, address):
        region = self.regions.get(address >> _REGION_SHIFT)
        return region is not None and bool(region[(address & 0xFFFFF) >> 7] & (1 << ((address >> 4) & 7)))

    def discard(self, address):
        region = self.regions.get(address >> _REGION_SHIFT)
        if region is not None:
            region[(address & 0xFFFFF) >> 7] &= ~(1 << ((address >> 4) & 7)) & 0xFF

    def nbytes(self):
        return len(self.regions) * _REGION_BYTES


class Tally(object):
    """Counts and bytes per key, in ``array`` storage: no GC-tracked object per entry.

    A census that created one tracked object per owner or type would itself trigger
    young-generation collections in the target, each walking the census's own big lists.
    """

    __slots__ = ("index", "keys", "counts", "bytes")

    def __init__(self):
        self.index = {}
        self.keys = []
        self.counts = array.array("q")
        self.bytes = array.array("q")

    def slot(self, key):
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.keys)
            self.keys.append(key)
            self.counts.append(0)
            self.bytes.append(0)
        return i

    def add(self, key, size):
        i = self.slot(key)
        self.counts[i] += 1
        self.bytes[i] += size

    def nbytes(self):
        return (sys.getsizeof(self.index) + sys.getsizeof(self.keys)
                + self.counts.buffer_info()[1] * 8 + self.bytes.buffer_info()[1] * 8)


class TypeTally(Tally):
    """A tally keyed by type, indexed by ``id(type)``: a class is never hashed (its
    metaclass's ``__hash__`` would run). ``keys`` holds the types, keeping their ids unique."""

    __slots__ = ()

    def slot(self, tp):
        i = self.index.get(id(tp))
        if i is None:
            i = self.index[id(tp)] = len(self.keys)
            self.keys.append(tp)
            self.counts.append(0)
            self.bytes.append(0)
        return i

