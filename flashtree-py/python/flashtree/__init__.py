"""flashtree: an embedded key-value store for NVMe SSDs.

A store is a directory holding named trees, each a sorted map from bytes to
bytes, kept in a B+-tree of 4 KiB pages behind a buffer pool, with a
write-ahead log for durable, atomic batches.

    import flashtree
    with flashtree.open("store", pool_bytes=256 << 20) as db:
        users = db.tree("users")
        users[b"alice"] = b"42"
        with db.batch() as b:          # all or nothing
            b.put(users, b"bob", b"7")
            b.delete(users, b"alice")
        for key, value in users.items(start=b"a"):
            print(key, value)

Every call releases the GIL while the engine works, so threads can share
one store.
"""

from ._flashtree import (
    Batch,
    ClosedError,
    CorruptError,
    Db,
    Error,
    FailedError,
    InvalidArgumentError,
    RangeIter,
    StoreFullError,
    StoreInUseError,
    Tree,
    UnsupportedError,
    open,
)

__all__ = [
    "open",
    "Db",
    "Tree",
    "Batch",
    "RangeIter",
    "Error",
    "InvalidArgumentError",
    "CorruptError",
    "StoreInUseError",
    "StoreFullError",
    "UnsupportedError",
    "FailedError",
    "ClosedError",
]
