"""The array API standard's `fft` extension for `gradpipe.ooc`, out of core.

```python
from gradpipe import ooc

spectrum = ooc.fft.rfft(signal, axis=-1)   # one line along the axis per tile row
```
"""

from .ops._fft import (
    fft,
    fftfreq,
    fftn,
    fftshift,
    hfft,
    ifft,
    ifftn,
    ifftshift,
    ihfft,
    irfft,
    irfftn,
    rfft,
    rfftfreq,
    rfftn,
)

__all__ = [
    "fft",
    "fftfreq",
    "fftn",
    "fftshift",
    "hfft",
    "ifft",
    "ifftn",
    "ifftshift",
    "ihfft",
    "irfft",
    "irfftn",
    "rfft",
    "rfftfreq",
    "rfftn",
]
