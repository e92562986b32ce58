"""The array API standard's `linalg` extension for `gradpipe.ooc`, out of core.

```python
from gradpipe import ooc

sign, logdet = ooc.linalg.slogdet(covariances)   # a stack of matrices, tile by tile
```
"""

from .ops import matmul, matrix_transpose, tensordot, vecdot
from .ops._linalg_extension import (
    EighResult,
    QRResult,
    SlogdetResult,
    SVDResult,
    cholesky,
    cross,
    det,
    diagonal,
    eigh,
    eigvalsh,
    inv,
    matrix_norm,
    matrix_power,
    matrix_rank,
    outer,
    pinv,
    qr,
    slogdet,
    solve,
    svd,
    svdvals,
    trace,
    vector_norm,
)

__all__ = [
    "EighResult",
    "QRResult",
    "SVDResult",
    "SlogdetResult",
    "cholesky",
    "cross",
    "det",
    "diagonal",
    "eigh",
    "eigvalsh",
    "inv",
    "matmul",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "matrix_transpose",
    "outer",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
    "tensordot",
    "trace",
    "vecdot",
    "vector_norm",
]
