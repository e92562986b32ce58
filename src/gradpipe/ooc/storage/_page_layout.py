"""The page grid of a paged array file: where each page lies in the file and how a
region of the array maps onto pages.

`PageLayout` is the arithmetic half of `PagedFile` (`_paged_file`), kept apart from
its I/O: page offsets, runs of pages along the last axis, the row pieces of a
region (`_pieces`), and copying between a run of pages and a region-shaped array.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ._header import HEADER_BYTES
from ._pieces import Pieces, region_pieces

__all__ = ["PageLayout", "Region", "is_whole", "page_grid"]

Region = tuple[slice, ...]


def is_whole(region: Region | None, shape: tuple[int, ...]) -> bool:
    """Whether ``region`` is all of an array of ``shape`` (None: a 0-d value, whole)."""
    return region is None or all(s.start == 0 and s.stop == n for s, n in zip(region, shape))


def page_grid(shape: tuple[int, ...], page_shape: tuple[int, ...]) -> tuple[int, ...]:
    """How many pages of ``page_shape`` cover ``shape`` along each axis."""
    return tuple(-(-n // p) if n else 0 for n, p in zip(shape, page_shape))


class PageLayout:
    """Region and page arithmetic of an array of ``shape`` stored in pages of
    ``page_shape``, after a `HEADER_BYTES` header, in C order of the page grid."""

    shape: tuple[int, ...]
    dtype: np.dtype
    page_shape: tuple[int, ...]
    grid: tuple[int, ...]
    page_bytes: int

    def normalize(self, region: Region | None) -> Region:
        """``region`` with every ``None`` bound filled in (``None``: the whole array)."""
        if region is None:
            return tuple(slice(0, n) for n in self.shape)
        return tuple(
            slice(s.start or 0, n if s.stop is None else s.stop) for s, n in zip(region, self.shape)
        )

    def _page_offset(self, index: tuple[int, ...]) -> int:
        flat = 0
        for i, g in zip(index, self.grid):
            flat = flat * g + i
        return HEADER_BYTES + flat * self.page_bytes

    def _page_runs(self, region: Region) -> Iterator[tuple[tuple[int, ...], int]]:
        """(first page index, run length) for each run of pages along the last axis."""
        lo = [s.start // p for s, p in zip(region, self.page_shape)]
        hi = [-(-s.stop // p) for s, p in zip(region, self.page_shape)]
        if not self.shape:
            yield (), 1
            return
        for lead in np.ndindex(*[h - lo_ for lo_, h in zip(lo[:-1], hi[:-1])]):
            yield (*[a + b for a, b in zip(lead, lo[:-1])], lo[-1]), hi[-1] - lo[-1]

    def _pieces(self, region: Region) -> Pieces | None:
        if not self.shape:
            return None
        pages = (
            (*first[:-1], first[-1] + r)
            for first, run in self._page_runs(region)
            for r in range(run)
        )
        return region_pieces(region, self.page_shape, self.dtype.itemsize, pages, self._page_offset)

    def _is_whole_page(self, region: Region, first: tuple[int, ...]) -> bool:
        """Whether ``region`` is exactly the (full-size) page ``first``."""
        return all(
            s.start == i * p and s.stop == (i + 1) * p
            for s, p, i in zip(region, self.page_shape, first)
        )

    def _covers(self, region: Region, first: tuple[int, ...], run: int) -> bool:
        """Whether ``region`` covers the whole (in-array part of the) page run."""
        for ax, (s, p, n) in enumerate(zip(region, self.page_shape, self.shape)):
            lo = first[ax] * p
            hi = min((first[ax] + (run if ax == len(region) - 1 else 1)) * p, n)
            if s.start > lo or s.stop < hi:
                return False
        return True

    def _scatter(
        self,
        region: Region,
        first: tuple[int, ...],
        run: int,
        pages: np.ndarray,
        arr: np.ndarray,
        *,
        to_pages: bool,
    ) -> None:
        """Copy between a run of pages and the region-shaped array ``arr``."""
        ps = self.page_shape
        for r in range(run):
            idx = (*first[:-1], first[-1] + r) if ps else ()
            page_sl, arr_sl = [], []
            for s, p, i in zip(region, ps, idx):
                lo, hi = max(s.start, i * p), min(s.stop, (i + 1) * p)
                page_sl.append(slice(lo - i * p, hi - i * p))
                arr_sl.append(slice(lo - s.start, hi - s.start))
            if to_pages:
                pages[r][tuple(page_sl)] = arr[tuple(arr_sl)]
            else:
                arr[tuple(arr_sl)] = pages[r][tuple(page_sl)]
