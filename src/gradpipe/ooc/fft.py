"""The array API standard's `fft` extension for `gradpipe.ooc`, out of core.

```python
from gradpipe import ooc

spectrum = ooc.fft.rfft(signal, axis=-1)   # one line along the axis per tile row
```
"""

from .ops import _fft
from .ops._fft import *  # noqa: F403

__all__ = list(_fft.__all__)
