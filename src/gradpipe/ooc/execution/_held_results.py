"""Small results held in memory instead of in scratch files.

A product of a tall array with a vector (``X @ w``) is K times smaller than what it
reads, and so are row sums and the other results that reduce the data; writing
them to a scratch file and reading them back costs I/O the pass does not need.
A scratch result of at most `SMALL_SHARE` of the memory budget is kept in an
anonymous in-memory file (`PagedFile.create(..., in_memory=True)`) while the held
results alive take at most `TOTAL_SHARE` of the budget; past that, new results go
to disk as before. Such a file reads and writes as any other, costs no disk I/O
(`io_stats` counts none), and is freed with its array.

Where a result lives never changes its values: tile plans do not depend on it.
Memory: held results are memory beside the tiles of a pass, at most
`TOTAL_SHARE` of the budget in all. Outputs that a named path or a cluster's
workers write stay on disk.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from ..planning._budget import MemoryBudget
from ..storage._paged_file import PagedFile

__all__ = [
    "SMALL_SHARE",
    "TOTAL_SHARE",
    "held_bytes",
    "hold_in_memory",
    "result_file",
]

#: The largest share of the budget one result held in memory may take.
SMALL_SHARE = 1 / 32
#: The largest share of the budget all results held in memory may take together.
TOTAL_SHARE = 1 / 8

_lock = threading.Lock()
_held = [0]


def held_bytes() -> int:
    """Bytes of results held in memory now."""
    return _held[0]


def hold_in_memory(nbytes: int, budget: MemoryBudget, pending: int = 0) -> bool:
    """Whether a new scratch result of ``nbytes`` should be held in memory, beside
    ``pending`` bytes already promised to others of the same pass."""
    limit = budget.nbytes
    with _lock:
        total = _held[0] + pending + nbytes
        return 0 < nbytes <= limit * SMALL_SHARE and total <= limit * TOTAL_SHARE


def result_file(
    shape: tuple[int, ...],
    dtype: Any,
    page_shape: tuple[int, ...],
    held: bool,
    path: str | os.PathLike[str] | None = None,
) -> PagedFile:
    """A new file for a result: in memory and counted as held until collected when
    ``held`` (and the system has anonymous files), else on disk, at ``path`` if given."""
    f = PagedFile.create(shape, dtype, page_shape, path=path, in_memory=held)
    if not f.on_disk:
        _track(f)
    return f


def _track(f: PagedFile) -> None:
    """Count the in-memory file ``f`` as held until it is collected."""
    nbytes = f.nbytes
    with _lock:
        _held[0] += nbytes
    weakref.finalize(f, _forget, nbytes)


def _forget(nbytes: int) -> None:
    with _lock:
        _held[0] -= nbytes
