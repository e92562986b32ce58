"""The training-step workloads of `ooc_params.py`: what a step computes, once.

A workload is its loss per row, written against an array namespace (``jax.numpy``
for the in-memory floor and the streaming loop, ``gradpipe.ooc`` for gradpipe), its
gradient by hand in NumPy (run as is by the NumPy floor and, on dask arrays, by dask),
its starting parameters and the target it reads beside ``X`` (``y.npy`` or
``labels.npy``). Every contender's loss is the mean of the rows' losses.

- ``lsq``: least squares, ``(X @ w + b - y)²``, ``w`` (K,) and ``b`` () from zeros;
  ``y = X @ w_true + 0.5 + noise``.
- ``mlp``: a two-layer MLP, ``z = tanh(X @ W1 + b1) @ W2 + b2`` with ``HIDDEN`` units
  and ``CLASSES`` classes, softmax cross-entropy ``logsumexp(z) - z[label]`` (the max
  subtracted under ``stop_gradient``, as ``jax.nn.logsumexp`` does), ``z[label]`` as
  ``sum(where(labels[:, None] == arange(16), z, 0))`` over int32 labels; ``W1``, ``W2``
  drawn with scale 1/sqrt(fan-in), the biases zero; ``labels = argmax(X @ T +
  noise)`` for a random ``T``. Not ``take_along_axis(z, labels[:, None], 1)``: in
  gradpipe.ooc that gathers, and its gradient scatters, one element per system call
  (a jitted value and gradient through 65536 x 16 picked values: 14 s, against
  0.01 s for the mask).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

HIDDEN, CLASSES = 64, 16


@dataclasses.dataclass(frozen=True)
class Workload:
    """One training step's loss, by namespace and by hand.

    - ``target``: the stem of the file read beside ``X`` (``y`` or ``labels``).
    - ``init(K)``: the starting parameters, NumPy float32 by name.
    - ``row_loss(xp, p, X, t)``: each row's loss, ``xp`` a namespace.
    - ``hand(X, t, p, compute)``: ``(loss, grads)`` in NumPy operators, every
      reduction handed to ``compute`` together (dask computes them in one pass).
    - ``row_bytes(K)``: what one row of a streamed block holds in memory while the
      block is computed (``X``'s row, its target, the intermediates), to size blocks.
      ``X``'s row counts twice: XLA on the CPU copies the block to compute ``X.T @
      r`` (least squares: 86 MiB above the start with a 64 MiB budget when it was
      counted once, 49 MiB counted twice).
    """

    name: str
    target: str
    init: Callable[[int], dict[str, np.ndarray]]
    row_loss: Callable
    hand: Callable
    row_bytes: Callable[[int], int]


# ---------------------------------------------------------------- least squares
def _lsq_rows(xp, p, X, y):
    return xp.square(X @ p["w"] + p["b"] - y)


def _lsq_hand(X, y, p, compute):
    r = X @ p["w"] + p["b"] - y
    value, gw, gb = compute((r * r).mean(), X.T @ r * (2 / X.shape[0]), 2 * r.mean())
    return value, {"w": gw, "b": gb}


LSQ = Workload(
    name="lsq",
    target="y",
    init=lambda k: {"w": np.zeros(k, np.float32), "b": np.zeros((), np.float32)},
    row_loss=_lsq_rows,
    hand=_lsq_hand,
    row_bytes=lambda k: 4 * (2 * k + 3),
)


# ---------------------------------------------------------------- two-layer MLP
def _mlp_init(k: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {
        "W1": (rng.standard_normal((k, HIDDEN)) / np.sqrt(k)).astype(np.float32),
        "b1": np.zeros(HIDDEN, np.float32),
        "W2": (rng.standard_normal((HIDDEN, CLASSES)) / np.sqrt(HIDDEN)).astype(np.float32),
        "b2": np.zeros(CLASSES, np.float32),
    }


def _mlp_rows(xp, p, X, labels):
    from jax.lax import stop_gradient

    z = xp.tanh(X @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
    m = stop_gradient(xp.max(z, axis=1, keepdims=True))
    lse = xp.log(xp.sum(xp.exp(z - m), axis=1)) + m[:, 0]
    hot = labels[:, None] == xp.arange(CLASSES, dtype=labels.dtype)
    return lse - xp.sum(xp.where(hot, z, 0.0), axis=1)


def _mlp_hand(X, labels, p, compute):
    h = np.tanh(X @ p["W1"] + p["b1"])
    z = h @ p["W2"] + p["b2"]
    m = z.max(axis=1, keepdims=True)
    e = np.exp(z - m)
    s = e.sum(axis=1, keepdims=True)
    hot = labels[:, None] == np.arange(CLASSES, dtype=np.int32)
    rows = np.log(s) + m - (z * hot).sum(axis=1, keepdims=True)
    dz = (e / s - hot) * np.float32(1 / X.shape[0])
    da = (dz @ p["W2"].T) * (1 - h * h)
    parts = compute(rows.mean(), X.T @ da, da.sum(axis=0), h.T @ dz, dz.sum(axis=0))
    value, *grads = parts
    return value, dict(zip(("W1", "b1", "W2", "b2"), grads))


MLP = Workload(
    name="mlp",
    target="labels",
    init=_mlp_init,
    row_loss=_mlp_rows,
    hand=_mlp_hand,
    row_bytes=lambda k: 4 * (2 * k + 1 + 3 * HIDDEN + 4 * CLASSES),
)

WORKLOADS = {w.name: w for w in (LSQ, MLP)}


# ---------------------------------------------------------------- inputs
def write_inputs(d, rows: int, cols: int) -> None:
    """``X.npy`` (standard normal, made in ~64 MiB row blocks), ``y.npy`` (float32)
    and ``labels.npy`` (int32) in the folder ``d``."""
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(cols).astype(np.float32)
    teacher = rng.standard_normal((cols, CLASSES)).astype(np.float32) / np.sqrt(cols)
    X = np.lib.format.open_memmap(d / "X.npy", "w+", np.float32, (rows, cols))
    y, labels = np.empty(rows, np.float32), np.empty(rows, np.int32)
    step = max(1, 64 * 2**20 // (4 * cols))
    for r in range(0, rows, step):
        block = rng.standard_normal((min(step, rows - r), cols), np.float32)
        X[r : r + step] = block
        y[r : r + step] = block @ w_true + 0.5 + 0.1 * rng.standard_normal(len(block))
        noise = 0.5 * rng.standard_normal((len(block), CLASSES), np.float32)
        labels[r : r + step] = np.argmax(block @ teacher + noise, axis=1)
    X.flush()
    del X
    np.save(d / "y.npy", y)
    np.save(d / "labels.npy", labels)
