"""Layer 3 of gradpipe.ooc: planning a pass.

The memory budget, fused chains and how they are read, operands held in memory, and
how a pass is cut into stages and tiles. It may import kernels and storage.
"""
