"""Core overhead: a 10-step Sequential of Lambdas against the 10 functions called directly.

(a) eager: median time per call of the pipeline over the direct calls (aim <= 3x);
(b) under jax.jit: equations in the pipeline's jaxpr over the hand-composed function's
    (must be 1.0: composition adds nothing to the compiled program).

Run: .venv/bin/python benchmarks/core_overhead.py
"""

from __future__ import annotations

import statistics
import timeit

import gradpipe as gp

STEPS = 10


def _functions():
    return [lambda x, i=i: x * 1.0001 + i for i in range(STEPS)]


def eager_ratio(repeats: int = 7, number: int = 20_000) -> tuple[float, float, float]:
    fns = _functions()
    pipeline = gp.Sequential([gp.Lambda(f) for f in fns])

    def direct(x):
        for f in fns:
            x = f(x)
        return x

    def hand(x):
        f0, f1, f2, f3, f4, f5, f6, f7, f8, f9 = fns
        return f9(f8(f7(f6(f5(f4(f3(f2(f1(f0(x))))))))))

    assert pipeline(1.0) == hand(1.0) == direct(1.0)
    t_pipe, t_hand = [], []
    for _ in range(repeats):
        t_pipe.append(timeit.timeit(lambda: pipeline(1.0), number=number) / number)
        t_hand.append(timeit.timeit(lambda: hand(1.0), number=number) / number)
    pipe, direct_t = statistics.median(t_pipe), statistics.median(t_hand)
    return pipe, direct_t, pipe / direct_t


def jaxpr_ratio() -> tuple[int, int]:
    import jax
    import jax.numpy as jnp

    fns = [lambda x, i=i: jnp.sin(x) * 1.0001 + i for i in range(STEPS)]
    pipeline = gp.Sequential([gp.Lambda(f) for f in fns])

    def hand(x):
        for f in fns:
            x = f(x)
        return x

    x = jnp.ones(5)
    n_pipe = len(jax.make_jaxpr(jax.jit(pipeline))(x).jaxpr.eqns[0].params["jaxpr"].eqns)
    n_hand = len(jax.make_jaxpr(jax.jit(hand))(x).jaxpr.eqns[0].params["jaxpr"].eqns)
    return n_pipe, n_hand


def main() -> dict:
    pipe, direct, ratio = eager_ratio()
    n_pipe, n_hand = jaxpr_ratio()
    print("core overhead (10-step Sequential of Lambdas)")
    print(f"{'measure':34} {'gradpipe':>12} {'direct':>12} {'ratio':>7}")
    print(
        f"{'(a) eager time per call':34} {pipe * 1e6:>10.2f}us {direct * 1e6:>10.2f}us {ratio:>7.2f}"
    )
    print(f"{'(b) jaxpr equations under jit':34} {n_pipe:>12} {n_hand:>12} {n_pipe / n_hand:>7.2f}")
    return {"eager_ratio": ratio, "jaxpr_ratio": n_pipe / n_hand}


if __name__ == "__main__":
    main()
