"""Layer 4 of gradpipe.ooc: running a pass.

The driver that runs a planned pass tile by tile, the executors (threads, a dask
cluster), results held in memory, and small sums that wait to be read.
"""

from . import _replaced_names  # noqa: F401  (registers its hook with the storage layer)
