"""Memory a C library holds for objects whose size leakhound cannot read.

An ``ssl.SSLContext`` is 144 bytes to ``sys.getsizeof`` and OpenSSL's context behind it (its
certificates, its session cache) is outside every Python size: 100 contexts a program kept
were 83 MiB of RSS in the ledger's "other" and in no owner. Where the heap has objects of such
types (payload/wire.py OPAQUE_NATIVE_TYPES: the type table lists them whatever their rank, the
graph keeps each a node) and "other" is big, this names them and how to find who holds them.
It says no bytes for them (none were measured), but SQLite's: its own count of what every
connection holds (``sqlite3_memory_used``, the ledger's "SQLite" row), within 5% of what
closing them returns, less what the connections sized natively hold (payload/sizes.py: under
their owners, ``heap.native_sqlite_bytes``). OpenSSL's contexts and connections are sized
where the walk scanned OpenSSL's heap for them (``heap.native_ssl_bytes``): then they are not
named here.
"""

from __future__ import annotations

from leakhound.analysis.ledger import SQLITE, ledger
from leakhound.model import Finding, Snapshot
from leakhound.model.units import MiB, fmt_bytes
from leakhound.payload.wire import OPAQUE_NATIVE_TYPES

KIND = "native_state"
# What each type of wire.OPAQUE_NATIVE_TYPES holds, in words (render/table.py's ``--why`` says it too)
HOLDS = {
    "ssl.SSLContext": "OpenSSL's context: its certificates and session cache",
    "_ssl._SSLContext": "OpenSSL's context: its certificates and session cache",
    "_ssl._SSLSocket": "an OpenSSL connection: its buffers",
    "sqlite3.Connection": "SQLite's connection: its page cache, schema and statements",
    "pyexpat.xmlparser": "expat's parser: its buffers",
}
# Sized where the walk scanned OpenSSL's heap (payload/sizes.py scanned_object_sizes)
SSL_TYPES = ("ssl.SSLContext", "_ssl._SSLContext", "_ssl._SSLSocket")
# "other" under this is an interpreter's and its libraries' own (a bare 3.11: ~10 MiB)
MIN_OTHER_BYTES = 32 * MiB
# Fewer objects of these types than this are a program's usual few (the real verifiers
# worker's HTTP clients: 3 SSL contexts, ~1 MB each at most) and no reason for a big "other":
# not named. SQLite's connections are named by SQLite's measured bytes instead, however few.
MIN_OBJECTS = 10


def detect(snapshot: Snapshot) -> list[Finding]:
    sized = SSL_TYPES if snapshot.heap.native_ssl_bytes > 0 else ()
    found = [t for t in snapshot.types if t.type in OPAQUE_NATIVE_TYPES and t.type not in sized and t.count > 0]
    rows = {row.name: row.bytes for row in ledger(snapshot)}
    other = rows.get("other", 0)
    # SQLite's memory is measured (its own count, the ledger's "SQLite" row: but what its
    # connections' owners hold, sized natively): said, and out of "other"
    sqlite = rows.get(SQLITE, 0) if any(t.type == "sqlite3.Connection" for t in found) else 0
    many = sum(t.count for t in found if t.type != "sqlite3.Connection") >= MIN_OBJECTS and other >= MIN_OTHER_BYTES
    if not found or not (many or sqlite >= MIN_OTHER_BYTES):
        return []
    found.sort(key=lambda t: -t.count)
    held = "; ".join(f"{t.count:,} {t.type} ({HOLDS.get(t.type, 'a C library')}"
                     + (f": {fmt_bytes(sqlite)} in all, SQLite's own count" if t.type == "sqlite3.Connection" and sqlite
                        else "") + ")" for t in found[:4])
    where = (f"{fmt_bytes(other)} of RSS is outside every Python object and allocator ('other' in the ledger), and "
             if other >= MIN_OTHER_BYTES else "")
    return [
        Finding(
            kind=KIND,
            severity="info",
            bytes=sqlite,
            count=sum(t.count for t in found),
            owner="",
            fix="",
            summary=(
                f"{where}these objects hold a C library's memory no Python size counts: {held}; "
                f"who holds them: leakhound inspect {snapshot.pid} --why {found[0].type}"
            ),
            details={"types": [{"type": t.type, "count": t.count, "holds": HOLDS.get(t.type, 'a C library')}
                               for t in found],
                     "other_bytes": other, "sqlite_bytes": sqlite},
        )
    ]
