"""The array API's data type objects and constants, as names of `gradpipe.ooc`.

The data types are NumPy's dtype objects, so ``x.dtype == ooc.float32`` holds for
a `DiskArray` and they hash alike. float16 arrays are stored and computed too (as
NumPy does), but the standard does not name float16, so neither does the namespace.
"""

# `bool` is the standard's name for the boolean dtype; this module defines nothing else
# that needs Python's builtin.
import math

import numpy as np

bool = np.dtype("bool")
"""The boolean data type."""
int8 = np.dtype("int8")
"""8-bit signed integers."""
int16 = np.dtype("int16")
"""16-bit signed integers."""
int32 = np.dtype("int32")
"""32-bit signed integers."""
int64 = np.dtype("int64")
"""64-bit signed integers (the default integer and index dtype)."""
uint8 = np.dtype("uint8")
"""8-bit unsigned integers."""
uint16 = np.dtype("uint16")
"""16-bit unsigned integers."""
uint32 = np.dtype("uint32")
"""32-bit unsigned integers."""
uint64 = np.dtype("uint64")
"""64-bit unsigned integers."""
float32 = np.dtype("float32")
"""IEEE 754 single precision."""
float64 = np.dtype("float64")
"""IEEE 754 double precision (the default floating dtype)."""
complex64 = np.dtype("complex64")
"""Complex numbers of two float32s."""
complex128 = np.dtype("complex128")
"""Complex numbers of two float64s (the default complex dtype)."""

e = math.e
"""Euler's number, 2.718..."""
pi = math.pi
"""The ratio of a circle's circumference to its diameter, 3.14159..."""
inf = math.inf
"""Positive infinity."""
nan = math.nan
"""Not a number."""
newaxis = None
"""An index that inserts an axis of size 1 (``x[:, ooc.newaxis]``)."""

DTYPES = {
    name: globals()[name]
    for name in [
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
    ]
}
"""The standard's data types by name."""
