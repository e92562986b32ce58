"""Out-of-core arrays: disk-backed `DiskArray`s with blocked, differentiable operations.

A `DiskArray` keeps its data in a paged file; operations read and write it tile by
tile within a `MemoryBudget`, and work eagerly and under `jax.jit` and `jax.grad`
(gradients are `DiskArray`s too).

```python
import jax, numpy as np
from gradpipe import ooc

X = ooc.DiskArray.from_numpy(np.random.rand(100_000, 64).astype(np.float32))
w = ooc.DiskArray.zeros((64, 1))
y = ooc.DiskArray.from_numpy(np.random.rand(100_000, 1).astype(np.float32))
loss = lambda w: ooc.mean(ooc.square(X @ w - y))
g = jax.jit(jax.grad(loss))(w)          # a DiskArray
```
"""

try:
    import jax as _jax  # noqa: F401
except ImportError as _error:
    raise ImportError(
        f"gradpipe.ooc needs JAX ({_error.name} is missing). Install the extra: "
        f"pip install 'gradpipe[ooc]'."
    ) from _error

import sys as _sys

from . import ops
from ._equinox import install as _install_equinox_filters
from ._explain import Plan, explain
from ._interop import from_zarr, to_memmap, to_zarr
from ._namespace_info import NamespaceInfo, __array_namespace_info__
from ._open_in_place import open_hdf5, open_zarr
from .arrays._array import DiskArray
from .arrays._device import Device
from .arrays._jax_hooks import install as _install_jax_hooks
from .arrays._namespace import Namespace as _Namespace
from .arrays._namespace import bind as _bind_namespace
from .arrays._op import BlockParallelOp, CustomOp, make_op
from .execution._driver import Driver, set_progress
from .execution._executor import DaskExecutor, executor
from .kernels._data_types import can_cast, finfo, iinfo, isdtype, result_type
from .ops import *  # noqa: F403
from .ops import __all__ as _ops_all
from .ops._cotangent_sum import add_cotangents as _add_cotangents
from .ops._einsum import register_with_opt_einsum as _register_with_opt_einsum
from .ops._setitem import set_item as _set_item
from .planning._budget import RSS_OVERHEAD_BYTES, MemoryBudget, get_budget, set_default_budget
from .planning._stages import Stage
from .storage._constants import (
    bool,
    complex64,
    complex128,
    e,
    float32,
    float64,
    inf,
    int8,
    int16,
    int32,
    int64,
    nan,
    newaxis,
    pi,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .storage._iostats import IOStats, io_stats, reset_io_stats
from .storage._paged_file import FORMAT_VERSION
from .storage._scratch import get_scratch_dir, set_scratch_dir

# DiskArray's operators and methods call the array API functions of this package,
# which are built above it (see arrays/_namespace.py)
_bind_namespace(
    _Namespace(
        package=_sys.modules[__name__],
        ops=ops,
        add_cotangents=_add_cotangents,
        set_item=_set_item,
    )
)
_install_equinox_filters()  # eqx.filter_grad & co. see DiskArrays as arrays
_install_jax_hooks()  # JAX's operators and primitives take DiskArrays
_register_with_opt_einsum()  # opt_einsum.contract (xarray's xr.dot) computes out of core

from . import fft, linalg  # noqa: E402

if "xarray" in _sys.modules:  # xarray's groupby adjusted for DiskArrays (ooc.xarray._groupby)
    import gradpipe.ooc.xarray  # noqa: F401

__array_api_version__ = "2024.12"
"""The version of the Python array API standard this namespace implements."""

__all__ = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "__array_api_version__",
    "__array_namespace_info__",
    "can_cast",
    "e",
    "finfo",
    "iinfo",
    "inf",
    "isdtype",
    "nan",
    "newaxis",
    "pi",
    "result_type",
    "Device",
    "NamespaceInfo",
    "FORMAT_VERSION",
    "RSS_OVERHEAD_BYTES",
    "BlockParallelOp",
    "CustomOp",
    "DiskArray",
    "Driver",
    "IOStats",
    "MemoryBudget",
    "Plan",
    "Stage",
    "explain",
    "get_budget",
    "get_scratch_dir",
    "io_stats",
    "make_op",
    "reset_io_stats",
    "set_default_budget",
    "set_progress",
    "executor",
    "DaskExecutor",
    "set_scratch_dir",
    "from_zarr",
    "open_hdf5",
    "open_zarr",
    "to_memmap",
    "to_zarr",
    "fft",
    "linalg",
    *_ops_all,
]
