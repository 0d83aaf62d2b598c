"""Type stubs of the flashtree extension module."""

from os import PathLike
from types import TracebackType
from typing import Iterable, Iterator, List, Optional, Tuple, Type, TypeVar, Union, overload

_T = TypeVar("_T")

class Error(Exception):
    """Any flashtree error."""

class InvalidArgumentError(Error):
    """A value the engine cannot take (a key too long, a batch too large, a bad option)."""

class CorruptError(Error):
    """The store's files are not what flashtree wrote."""

class StoreInUseError(Error):
    """Another open store (in this process or another) holds the store's lock."""

class StoreFullError(Error):
    """The store has no room left."""

class UnsupportedError(Error):
    """The environment refuses what the store needs (for example O_DIRECT)."""

class FailedError(Error):
    """A write or sync failed: the store stopped; close and reopen it to recover."""

class ClosedError(Error):
    """The store is closed."""

def open(
    path: Union[str, "PathLike[str]"],
    pool_bytes: int = 64 * 1024 * 1024,
    durability: str = "sync",
    workers: int = 1,
    create: bool = True,
    max_delay_ms: int = 10,
    wal_bytes_per_worker: Optional[int] = None,
) -> "Db":
    """Opens (or creates) the store in directory `path`.

    durability: "sync" (a write returns when it would survive a power cut),
    "buffered" (the log is synced within max_delay_ms) or "none" (no log).
    wal_bytes_per_worker: the log each worker preallocates on disk
    (default 256 MiB; at least 1 MiB, a multiple of 4096).
    """

class Db:
    """An open store; closes at the end of a `with` block."""

    @property
    def path(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def tree(self, name: str) -> "Tree":
        """The tree named `name`, created empty if missing."""
    def tree_names(self) -> List[str]: ...
    def batch(self) -> "Batch":
        """A batch committed atomically at the end of a `with` block."""
    def sync(self) -> None:
        """Makes every earlier change durable."""
    def check(self) -> int:
        """Checks every tree and page; returns the number of records."""
    def close(self) -> None: ...
    def __enter__(self) -> "Db": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class Tree:
    """A named sorted map from bytes to bytes."""

    @property
    def name(self) -> str: ...
    def __getitem__(self, key: bytes) -> bytes: ...
    def __setitem__(self, key: bytes, value: bytes) -> None: ...
    def __delitem__(self, key: bytes) -> None: ...
    def __contains__(self, key: bytes) -> bool: ...
    def __iter__(self) -> "RangeIter": ...
    @overload
    def get(self, key: bytes) -> Optional[bytes]: ...
    @overload
    def get(self, key: bytes, default: _T) -> Union[bytes, _T]: ...
    def put(self, key: bytes, value: bytes) -> None: ...
    def delete(self, key: bytes) -> bool:
        """Deletes `key`; returns whether it was there."""
    def get_many(self, keys: Iterable[bytes]) -> List[Optional[bytes]]:
        """The values of `keys` (None where absent), looked up concurrently."""
    def items(
        self, start: Optional[bytes] = None, end: Optional[bytes] = None, reverse: bool = False
    ) -> Iterator[Tuple[bytes, bytes]]: ...
    def keys(
        self, start: Optional[bytes] = None, end: Optional[bytes] = None, reverse: bool = False
    ) -> Iterator[bytes]: ...
    def values(
        self, start: Optional[bytes] = None, end: Optional[bytes] = None, reverse: bool = False
    ) -> Iterator[bytes]: ...

class RangeIter(Iterator):
    def __iter__(self) -> "RangeIter": ...
    def __next__(self): ...

class Batch:
    """Puts and deletes over any trees of one store, applied all or nothing."""

    def put(self, tree: Tree, key: bytes, value: bytes) -> None: ...
    def delete(self, tree: Tree, key: bytes) -> None: ...
    def commit(self) -> None: ...
    def discard(self) -> None: ...
    def __len__(self) -> int: ...
    def __enter__(self) -> "Batch": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
