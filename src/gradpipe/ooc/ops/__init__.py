"""Built-in out-of-core operations, each differentiable under `jax.grad`.

One module per family of the array API standard; each exports its functions in its
``__all__``, and this package re-exports them all.
"""

from . import (
    _creation,
    _cumulative,
    _differences,
    _einsum,
    _elementwise,
    _linalg,
    _manipulation,
    _nanreduce,
    _pad,
    _quantile,
    _searching,
    _sorting,
    _statistics,
    _stop_gradient,  # noqa: F401  (jax.lax.stop_gradient of a DiskArray: a step)
    _take,
)
from ._creation import *  # noqa: F403
from ._cumulative import *  # noqa: F403
from ._differences import *  # noqa: F403
from ._einsum import *  # noqa: F403
from ._elementwise import *  # noqa: F403
from ._layout import getitem, slice_rows, slice_tile, transpose
from ._linalg import *  # noqa: F403
from ._manipulation import *  # noqa: F403
from ._matmul import matmul
from ._nanreduce import *  # noqa: F403
from ._pad import *  # noqa: F403
from ._persist import persist
from ._quantile import *  # noqa: F403
from ._searching import *  # noqa: F403
from ._sorting import *  # noqa: F403
from ._statistics import *  # noqa: F403
from ._take import *  # noqa: F403
from ._update import update_

__all__ = [
    *_creation.__all__,
    *_cumulative.__all__,
    *_differences.__all__,
    *_einsum.__all__,
    *_elementwise.__all__,
    *_linalg.__all__,
    *_manipulation.__all__,
    *_nanreduce.__all__,
    *_pad.__all__,
    *_quantile.__all__,
    *_searching.__all__,
    *_sorting.__all__,
    *_statistics.__all__,
    *_take.__all__,
    "getitem",
    "matmul",
    "persist",
    "slice_rows",
    "slice_tile",
    "transpose",
    "update_",
]
