"""The array API standard's `linalg` extension, out of core (beyond the products):
the names of `_linalg_axes` and `_linalg_dense`, which `gradpipe.ooc.linalg` exports.

Two kinds of function:

- functions of a few entries or of whole axes (`diagonal`, `trace`, `outer`,
  `cross`, `vector_norm`, `matrix_norm`) are written with the namespace's own
  out-of-core functions (reshape and strided indexing, reductions, elementwise
  kernels), so memory stays bounded whatever the matrix size and their gradients
  come with those functions;
- dense per-matrix factorizations (`cholesky`, `det`, `eigh`, `inv`, `qr`, `svd`,
  ...) are `CoreAxes` kernels: each tile holds whole matrices of a stack, as many
  as the budget allows (one matrix must fit; a `MemoryError` says so otherwise).
  The forward pass is NumPy's LAPACK; the gradient is JAX's VJP of the same
  ``jax.numpy.linalg`` function evaluated with NumPy, and a function whose VJP JAX
  refuses (`svd` with ``full_matrices=True``, `matrix_rank`) is refused by name.

Functions returning several arrays return the standard's named tuples; each field
is its own pass over the stack.
"""

from __future__ import annotations

from . import _linalg_axes, _linalg_dense
from ._linalg_axes import *  # noqa: F403
from ._linalg_dense import *  # noqa: F403

__all__ = sorted([*_linalg_axes.__all__, *_linalg_dense.__all__])
