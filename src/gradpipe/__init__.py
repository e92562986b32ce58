"""gradpipe: differentiable scientific pipelines in JAX.

The top-level namespace holds the JAX-free core (`gradpipe.core`); the JAX layer,
components, serving and out-of-core arrays are the subpackages `gradpipe.jax`,
`gradpipe.component`, `gradpipe.serve` and `gradpipe.ooc`.
"""

from .core import *  # noqa: F403
from .core import __all__ as _core_all

__version__ = "0.1.0"
__all__ = [*_core_all, "__version__"]
