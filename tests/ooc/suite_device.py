"""Where the out-of-core suite computes, and how closely its answers can agree there.

`make test-device` (GRADPIPE_TEST_DEVICE=tpu) runs the suite with gradpipe's passes
on the accelerator, JAX's default device. Its 32-bit arithmetic is the device's own:
a TPU v5e's exp, log and tanh keep about four digits (measured there against the
host's: tanh 8e-5, log 3.6e-4, log1p 1.5e-4, expm1 1.2e-4 relative; matrix products
keep about seven at the 'highest' precision `make test-device` asks for). The
tolerances the tests were written with are the host's, so on a device a comparison
of 32-bit (or narrower) floats is made at least `NARROW_FLOAT` wide, its absolute
part in units of the largest expected magnitude (a sum's rounding grows with its
terms, not with the sum); 64-bit values, which only the host computes, keep the
test's own.
"""

from __future__ import annotations

import functools
import os

import numpy as np

ON_DEVICE = os.environ.get("GRADPIPE_TEST_DEVICE", "cpu") != "cpu"

#: the least tolerance of a comparison of narrow floats on the device (atol: per unit
#: of the largest expected magnitude, at least 1)
NARROW_FLOAT = dict(rtol=1e-3, atol=2e-4)


def _narrow(x) -> bool:
    dtype = np.asarray(x).dtype
    if dtype.kind == "c":
        return dtype.itemsize <= 8
    # (ml_dtypes' bfloat16 and float8 types are of kind "V")
    return (dtype.kind == "f" and dtype.itemsize <= 4) or (
        dtype.kind == "V" and "float" in dtype.name
    )


def tolerance(rtol: float, atol: float, got, want) -> tuple[float, float]:
    """The test's ``(rtol, atol)``, widened on the device where a value is narrow."""
    if not (ON_DEVICE and (_narrow(got) or _narrow(want))):
        return rtol, atol
    want = np.asarray(want)
    if want.dtype.kind not in "fcbiuV":  # (objects: the test's own tolerance)
        return max(rtol, NARROW_FLOAT["rtol"]), max(atol, NARROW_FLOAT["atol"])
    want = want.astype(np.complex128 if want.dtype.kind == "c" else np.float64)
    finite = np.abs(want[np.isfinite(want)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    return max(rtol, NARROW_FLOAT["rtol"]), max(atol, NARROW_FLOAT["atol"] * scale)


def _at_device_precision(assert_allclose):
    @functools.wraps(assert_allclose)
    def compare(actual, desired, rtol=1e-7, atol=0, *args, **kwargs):
        rtol, atol = tolerance(rtol, atol, actual, desired)
        return assert_allclose(actual, desired, rtol, atol, *args, **kwargs)

    return compare


def compare_at_device_precision() -> None:
    """Give `numpy.testing.assert_allclose` the device's tolerances (on a device only)."""
    if ON_DEVICE and not hasattr(np.testing.assert_allclose, "__wrapped__"):
        np.testing.assert_allclose = _at_device_precision(np.testing.assert_allclose)
