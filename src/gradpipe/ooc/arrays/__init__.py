"""Layer 5 of gradpipe.ooc: the array and its tracing.

`DiskArray`, its JAX type and primitives, host callbacks, integer handles under
`jax.jit`, the refusals of unsupported transformations, and the authoring API for
operations (`BlockParallelOp`, `CustomOp`, `make_op`).
"""
