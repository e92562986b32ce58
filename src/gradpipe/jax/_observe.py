"""`DebugTap`: look at values as the compiled function computes them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax

from ._pytree import JaxOperator

__all__ = ["DebugTap"]


class DebugTap(JaxOperator):
    """Calls ``fn`` on the value passing through, and passes the value on unchanged.

    The JAX-native twin of `gradpipe.Tap`. `Tap` is Python code, so under
    ``jax.jit`` it would run once, while tracing, on a tracer; it refuses instead.
    `DebugTap` goes through ``jax.debug.callback``, which the compiled function
    calls with concrete NumPy values every time it runs: three jitted calls, three
    callbacks. Under ``jax.vmap`` ``fn`` is called once per batch element; under
    ``jax.grad`` it sees the forward values.

    The callback runs on the host, outside the computation. Its order relative to
    other callbacks is not guaranteed unless ``ordered=True``, and with several
    devices the order of the devices' calls is never guaranteed. Use it to log and
    to debug, never to feed a value back into the pipeline.

    **Arguments:**

    - `fn`: a function of the step's input (a PyTree of NumPy arrays); its return
      value is ignored.
    - `ordered`: keep the callbacks in program order (costs some parallelism and is
      not allowed under ``jax.vmap``).

    ```python
    pipe = JaxSequential([invert, DebugTap(lambda z: print(z.min())), combine])
    ```

    A `DebugTap` cannot be saved: a function has no configuration.
    """

    fn: Callable[[Any], Any] = eqx.field(static=True)
    ordered: bool = eqx.field(static=True, default=False)

    def __check_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(f"DebugTap.fn must be callable, got {type(self.fn).__name__}.")

    def _apply(self, x: Any) -> Any:
        jax.debug.callback(self.fn, x, ordered=self.ordered)
        return x

    @property
    def name(self) -> str:
        """`DebugTap(<function name>)`: used in summaries and errors."""
        return f"DebugTap({getattr(self.fn, '__name__', 'fn')})"
