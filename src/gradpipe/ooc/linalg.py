"""The array API standard's `linalg` extension for `gradpipe.ooc`, out of core.

```python
from gradpipe import ooc

sign, logdet = ooc.linalg.slogdet(covariances)   # a stack of matrices, tile by tile
```
"""

from .ops import _linalg_extension
from .ops import matmul as matmul
from .ops import matrix_transpose as matrix_transpose
from .ops import tensordot as tensordot
from .ops import vecdot as vecdot
from .ops._linalg_extension import *  # noqa: F403

# the extension's own functions, and the four the standard lists in both namespaces
__all__ = sorted(
    [*_linalg_extension.__all__, "matmul", "matrix_transpose", "tensordot", "vecdot"],
    key=str.lower,
)
