"""Layer 2 of gradpipe.ooc: computing one block.

The kernel contract, host evaluation of JAX primitives on NumPy blocks, dtype
promotion and the x64 rules. It may import storage only.
"""
