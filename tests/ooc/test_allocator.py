"""The C heap between a pass's pieces (glibc): blocks freed by one piece's program
serve the next without faulting their pages in again; after the pass the tiles'
rule (large blocks mapped, and handed back when freed) holds again."""

from __future__ import annotations

import ctypes
import platform
import resource
import threading

import pytest

from gradpipe.ooc.storage._allocator import kept_between_pieces, use_mmap_for_tiles

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not hasattr(resource, "RUSAGE_THREAD"),
    reason="the heap's settings are glibc's (mallopt), the faults counted are Linux's",
)

BLOCK = 8 * 2**20  # a piece's block: above the tiles' mmap threshold (1 MiB)
PAGES = BLOCK // 4096


def _fill_a_block() -> None:
    # as XLA allocates a program's buffers: malloc'd, written, freed (NumPy would ask
    # for huge pages, which fault 512 times less)
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    block = libc.malloc(BLOCK)
    assert block
    ctypes.memset(block, 1, BLOCK)
    libc.free(block)


def _faults_of_a_fresh_block() -> int:
    """Minor page faults of filling a block allocated after one just like it was freed."""
    _fill_a_block()
    # (this thread's faults: JAX's and other pools' threads fault too)
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    _fill_a_block()
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before


@pytest.fixture(autouse=True)
def mapped_blocks_fault():
    """The tiles' rule in force, where a fresh mapping faults page by page (not where
    the kernel gives it huge pages at once, transparent_hugepage=always)."""
    assert use_mmap_for_tiles()
    if _faults_of_a_fresh_block() < PAGES // 2:
        pytest.skip("this kernel maps fresh memory in huge pages: no faults to save")


def test_blocks_freed_in_a_pass_serve_the_next_without_faults():
    assert _faults_of_a_fresh_block() >= PAGES // 2  # mapped afresh each time
    with kept_between_pieces(4 * BLOCK):
        assert _faults_of_a_fresh_block() < PAGES // 8
    assert _faults_of_a_fresh_block() >= PAGES // 2  # the tiles' rule again


def test_passes_running_at_once_keep_the_heap_until_the_last_ends():
    inner_started, outer_may_end = threading.Event(), threading.Event()

    def other_pass():
        with kept_between_pieces(2 * BLOCK):
            inner_started.set()
            outer_may_end.wait(10)

    t = threading.Thread(target=other_pass)
    with kept_between_pieces(4 * BLOCK):
        t.start()
        assert inner_started.wait(10)
    # this pass ended, the other runs on: its blocks are still kept
    assert _faults_of_a_fresh_block() < PAGES // 8
    outer_may_end.set()
    t.join(10)
    assert _faults_of_a_fresh_block() >= PAGES // 2
