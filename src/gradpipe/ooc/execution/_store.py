"""`Store`: the block map that writes its one input as it is (how a chain is stored)."""

from __future__ import annotations

import os

import numpy as np

from ..storage._paged_file import Region

__all__ = ["Store"]


class Store:
    """The block map that writes its one input as it is: how a chain is stored
    (into a scratch file, or the file at ``path``)."""

    name = "store"
    fusable = False

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = path

    def output_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        return s

    def reduction_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        return ()

    def output_dtype(self, d: np.dtype) -> np.dtype:
        return d

    accumulator_dtype = output_dtype

    def thin_axes(self, s: tuple[int, ...]) -> tuple[int, ...]:
        return ()

    def index_map(self, out_r: Region, red_r: Region, s: tuple[int, ...]) -> tuple[Region]:
        return (out_r,)

    def forward_block(self, x: np.ndarray) -> np.ndarray:
        return x
