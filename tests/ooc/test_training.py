"""A jitted training loop on a disk-backed weight: one compilation, in-memory answer."""

import jax
import jax.monitoring
import numpy as np

from gradpipe import ooc


def test_jitted_training_loop_compiles_once_and_converges(rng):
    X = rng.standard_normal((300, 12)).astype(np.float32)
    w_true = rng.standard_normal((12, 1)).astype(np.float32)
    Y = X @ w_true + 0.01 * rng.standard_normal((300, 1)).astype(np.float32)
    x, y = ooc.DiskArray.from_numpy(X), ooc.DiskArray.from_numpy(Y)
    w = ooc.DiskArray.zeros((12, 1))

    traces, compiles = [], []

    def on_event(name, secs, **kw):
        if name.endswith("backend_compile_duration"):
            compiles.append(name)

    @jax.jit
    def step(w):
        traces.append(1)
        loss, g = jax.value_and_grad(lambda w: ooc.mean(ooc.square(x @ w - y)))(w)
        return ooc.update_(w, w - 0.5 * g), loss

    losses = []
    w, loss = step(w)  # compiles the step (and the program of its loss's pass, once)
    losses.append(float(loss))
    jax.monitoring.register_event_duration_secs_listener(on_event)
    try:
        for _ in range(59):
            w, loss = step(w)
            losses.append(float(loss))
    finally:
        jax.monitoring.unregister_event_duration_listener(on_event)

    assert len(traces) == 1
    assert compiles == []  # nothing compiles again, in the step or in its passes
    assert losses[-1] < losses[0] / 100
    w_star = np.linalg.lstsq(X.astype(np.float64), Y.astype(np.float64), rcond=None)[0]
    np.testing.assert_allclose(w.to_numpy(), w_star, rtol=1e-3, atol=1e-4)


def test_training_loop_keeps_a_bounded_number_of_scratch_files(rng):
    X = rng.standard_normal((40, 4)).astype(np.float32)
    x = ooc.DiskArray.from_numpy(X)
    w = ooc.DiskArray.zeros((4, 1))
    step = jax.jit(lambda w: ooc.update_(w, w - 0.01 * jax.grad(lambda w: ooc.sum(x @ w))(w)))
    scratch = ooc.get_scratch_dir()
    counts = []
    for _ in range(30):
        w = step(w)
        counts.append(len(list(scratch.iterdir())))
    assert max(counts[10:]) <= counts[5] + 2
