"""The running example: a five-band retrieval under jit, vmap and grad, learned and saved.

A sensor sees a column amount α (in Dobson units, DU) through five bands as
transmittances (no unit) y_b = exp(-k_b α) + ε_b, with absorption coefficients
k = (0.002, ..., 0.010) per DU, noise σ = 1e-3 and α ~ U(0, 300 DU). The retrieval inverts each
band, z_b = -log(y_b) / k_b, and averages the five with inverse-variance weights
w_b = (k_b y_b)² / σ² (to first order, var z_b = σ² / (k_b y_b)²).

- Stage 1: the retrieval as a plain pipeline under jit, vmap and grad; the gradient
  gives each scene's error bar σ‖∇_y α̂‖.
- Stage 2: learn log k from 2,000 labelled scenes with Adam, by rebuilding the
  pipeline around an equinox module inside the loss.
- Stage 3: the same with PyTree operators in a `JaxSequential`.
- Stage 4: the trained pipeline through the registry and back; a truncated scan of
  an hourly plume; an ODE forward model under three adjoints.

Run: python examples/retrieval.py [outdir]   (plots go to outdir, default ./out)
"""

from __future__ import annotations

import json
import pathlib
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import gradpipe as gp
from gradpipe.jax import (
    BacksolveAdjoint,
    DirectAdjoint,
    JaxModelOp,
    JaxOperator,
    JaxSequential,
    ODEForwardModel,
    RecursiveCheckpointAdjoint,
    from_registry,
    truncated_scan,
)

K = (0.002, 0.004, 0.006, 0.008, 0.010)
SIGMA = 1e-3
ALPHA_MAX = 300.0
N_TEST, N_TRAIN = 500, 2_000
STEPS, LEARNING_RATE = 400, 1e-2
K_ERROR = 0.10  # the starting coefficients are off by up to 10 %


# -- the sensor and the retrieval's arithmetic ----------------------------------------


def simulate(rng: np.random.Generator, n: int) -> tuple[jax.Array, jax.Array]:
    """``n`` scenes: true α of shape (n,) and noisy transmittances y of shape (n, 5)."""
    alpha = rng.uniform(0.0, ALPHA_MAX, size=n)
    y = np.exp(-alpha[:, None] * np.asarray(K)) + SIGMA * rng.standard_normal((n, 5))
    return jnp.asarray(alpha), jnp.asarray(y)


def invert_bands(y: jax.Array, log_k: jax.Array) -> jax.Array:
    """z_b = -log(y_b) / k_b: one estimate of α per band."""
    return -jnp.log(y) / jnp.exp(log_k)


def weighted_mean(z: jax.Array, log_k: jax.Array) -> jax.Array:
    """Σ w_b z_b / Σ w_b with w_b = (k_b y_b)², y_b = exp(-k_b z_b) (σ² cancels)."""
    k = jnp.exp(log_k)
    w = (k * jnp.exp(-k * z)) ** 2
    return jnp.sum(w * z, axis=-1) / jnp.sum(w, axis=-1)


def core_retrieval(log_k: jax.Array) -> gp.Sequential:
    """Stage 1's pipeline: two `Lambda` steps in a plain core `Sequential`."""
    return gp.Sequential(
        [
            gp.Lambda(partial(invert_bands, log_k=log_k), name="invert_bands"),
            gp.Lambda(partial(weighted_mean, log_k=log_k), name="weighted_mean"),
        ]
    )


def rmse(estimate: jax.Array, truth: jax.Array) -> float:
    return float(jnp.sqrt(jnp.mean((estimate - truth) ** 2)))


# -- stage 1: jit, vmap and grad through a plain pipeline ---------------------------


def stage1(alpha: jax.Array, y: jax.Array) -> dict[str, float]:
    """Run the retrieval eagerly and under jit, vmap and grad; error bars from grad."""
    retrieval = core_retrieval(jnp.log(jnp.asarray(K)))
    eager = jnp.stack([retrieval(row) for row in y[:10]])
    jitted = jax.jit(retrieval)
    jit_vs_eager = float(jnp.max(jnp.abs(jnp.stack([jitted(row) for row in y[:10]]) - eager)))
    estimate = jax.vmap(retrieval)(y)
    sigma = SIGMA * jnp.linalg.norm(jax.vmap(jax.grad(retrieval))(y), axis=1)
    return {
        "jit_vs_eager": jit_vs_eager,
        "rmse": rmse(estimate, alpha),
        "rms_sigma": float(jnp.sqrt(jnp.mean(sigma**2))),
        "rms_standardised": float(jnp.sqrt(jnp.mean(((estimate - alpha) / sigma) ** 2))),
        "estimate": estimate,
        "sigma": sigma,
    }


# -- stage 2: learn log k by rebuilding the pipeline around a module ---------------


class BandInversion(eqx.Module):
    """The user's module: the learned log k of the five bands."""

    log_k: jax.Array

    def __call__(self, y: jax.Array) -> jax.Array:
        return invert_bands(y, self.log_k)


def rebuilt_pipeline(module: BandInversion) -> gp.Sequential:
    """A core pipeline around ``module``; both steps use its log k (one tied parameter)."""
    combine = gp.Lambda(partial(weighted_mean, log_k=module.log_k), name="weighted_mean")
    return gp.Sequential([JaxModelOp(module), combine])


def loss_of_module(module: BandInversion, y: jax.Array, alpha: jax.Array) -> jax.Array:
    """Mean squared retrieval error; the pipeline is rebuilt inside, so grad reaches it."""
    return jnp.mean((jax.vmap(rebuilt_pipeline(module))(y) - alpha) ** 2)


# -- stage 3: the same with PyTree operators ---------------------------------------


class Invert(JaxOperator):
    """z_b = -log(y_b) / k_b, holding its own log k."""

    log_k: jax.Array

    def _apply(self, y: jax.Array) -> jax.Array:
        return invert_bands(y, self.log_k)


class Combine(JaxOperator):
    """The inverse-variance mean, holding its own log k."""

    log_k: jax.Array

    def _apply(self, z: jax.Array) -> jax.Array:
        return weighted_mean(z, self.log_k)


def loss_of_pipeline(pipeline: JaxSequential, y: jax.Array, alpha: jax.Array) -> jax.Array:
    """Mean squared retrieval error of a PyTree pipeline."""
    return jnp.mean((jax.vmap(pipeline)(y) - alpha) ** 2)


def train(
    model: Any, loss: Callable[..., jax.Array], y: jax.Array, alpha: jax.Array
) -> tuple[Any, list[float]]:
    """Adam on every inexact array of ``model``; returns the model and the loss curve."""
    optimizer = optax.adam(LEARNING_RATE)
    state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    def step(model, state):
        value, grads = eqx.filter_value_and_grad(loss)(model, y, alpha)
        updates, state = optimizer.update(grads, state)
        return eqx.apply_updates(model, updates), state, value

    losses = []
    for _ in range(STEPS):
        model, state, value = step(model, state)
        losses.append(float(value))
    return model, losses


def starting_log_k(rng: np.random.Generator) -> jax.Array:
    """log k of coefficients off by up to ±10 %, as from an old line list."""
    factors = 1.0 + rng.uniform(-K_ERROR, K_ERROR, size=5)
    return jnp.log(jnp.asarray(K) * factors)


@jax.jit
def _tied_and_split_gradients(log_k: jax.Array, y: jax.Array, alpha: jax.Array):
    tied = eqx.filter_grad(loss_of_module)(BandInversion(log_k), y, alpha).log_k
    pipeline = JaxSequential([Invert(log_k), Combine(log_k)])
    split = eqx.filter_grad(loss_of_pipeline)(pipeline, y, alpha)
    return tied, split.operators[0].log_k + split.operators[1].log_k


def tied_gradient_error(log_k: jax.Array, y: jax.Array, alpha: jax.Array) -> float:
    """|∂L/∂log k (tied, stage 2) - sum of the two operators' gradients (stage 3)|,
    relative to the largest component."""
    tied, summed = _tied_and_split_gradients(log_k, y, alpha)
    return float(jnp.max(jnp.abs(tied - summed)) / jnp.max(jnp.abs(tied)))


# -- stage 4: registry, truncated scan, ODE ------------------------------------------


def registry_round_trip(pipeline: JaxSequential, module: BandInversion, root: pathlib.Path):
    """Store both trained forms with their weights, reload, compare byte for byte."""
    registry = gp.Registry(root)
    blob = pipeline.serialize_weights()
    # Run as a script (not through `make demo`), the classes live in __main__, which
    # only this script can import again: fine here, as it reloads in this process.
    local = __name__ == "__main__"
    ref = registry.store(
        pipeline, weights=blob, tags=["retrieval-trained"], force=True, allow_unimportable=local
    )
    reloaded = from_registry(registry, ref)
    model_op = JaxModelOp(module)
    model_ref = registry.store(model_op, weights=model_op.serialize_weights())
    template = JaxModelOp(BandInversion(jnp.zeros(5)))
    reloaded_module = from_registry(registry, model_ref, like=template).module
    state_json = json.dumps(pipeline.state)
    return {
        "ref": ref,
        "weights_identical": registry.load_weights(ref) == blob
        and reloaded.serialize_weights() == blob,
        "max_abs_difference": float(
            max(
                jnp.max(jnp.abs(a.log_k - b.log_k))
                for a, b in zip(reloaded.operators, pipeline.operators)
            )
        ),
        "module_identical": bool(jnp.array_equal(reloaded_module.log_k, module.log_k)),
        "state_json": state_json,
    }


def _refill(c: jax.Array, q_t: jax.Array) -> tuple[jax.Array, jax.Array]:
    c = 0.9 * c + q_t
    return c, c


@partial(jax.jit, static_argnames="k")
def _plume_runs(q: jax.Array, k: int):
    full = jax.lax.scan(_refill, 0.0, q)
    truncated = truncated_scan(_refill, 0.0, q, k=k)
    grad_k = jax.grad(lambda q: truncated_scan(_refill, 0.0, q, k=k)[0])(q)
    grad_all = jax.grad(lambda q: truncated_scan(_refill, 0.0, q, k=len(q))[0])(q)
    return full, truncated, grad_k, grad_all


def plume(hours: int = 24, k: int = 3) -> dict[str, Any]:
    """c_{t+1} = 0.9 c_t + q_t: gradients of the last column, truncated to k steps."""
    q = 1.0 + 0.5 * jnp.sin(2 * jnp.pi * jnp.arange(hours) / hours)
    full, truncated, grad_k, grad_all = _plume_runs(q, k)
    return {
        "forward_identical": bool(
            jnp.array_equal(full[0], truncated[0]) and jnp.array_equal(full[1], truncated[1])
        ),
        "nonzero_truncated": int(jnp.count_nonzero(grad_k)),
        "dcT_dq0": float(grad_all[0]),
    }


def decay_model() -> ODEForwardModel:
    """dc/dt = -λ c with λ = 0.25 per hour, one hour per call."""
    return ODEForwardModel(
        lambda t, c, lam: -lam * c, dt=1.0, dt0=0.01, args=jnp.asarray(0.25), max_steps=128
    )


def ode_check(c0: float = 100.0) -> dict[str, Any]:
    """One hour from c0, and ∂c/∂c0, under each of the three adjoints."""
    model = decay_model()
    values, grads = {}, {}
    for name, spec in [
        ("direct", DirectAdjoint()),
        ("backsolve", BacksolveAdjoint()),
        ("recursive_checkpoint", RecursiveCheckpointAdjoint()),
    ]:
        value, grad = jax.jit(jax.value_and_grad(model.with_adjoint(spec)))(jnp.asarray(c0))
        values[name], grads[name] = float(value), float(grad)
    return {"values": values, "grads": grads}


# -- plots -------------------------------------------------------------------------------


def plot_retrieval(alpha, estimate, sigma, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    alpha, estimate, sigma = (np.asarray(a) for a in (alpha, estimate, sigma))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    true_label = "true column amount α (DU)"
    left.plot(alpha, estimate, ".", ms=4, alpha=0.6, label=f"{len(alpha)} test scenes")
    # The 1:1 line goes over the points: they lie on it to within 1 DU.
    left.plot([0, ALPHA_MAX], [0, ALPHA_MAX], color="k", lw=1.2, zorder=3, label="1:1 line")
    left.set(
        xlabel=true_label,
        ylabel="retrieved column amount α̂ (DU)",
        title="Retrieved against true column amount",
    )
    left.legend()
    right.errorbar(
        alpha,
        estimate - alpha,
        yerr=sigma,
        fmt=".",
        ms=3,
        elinewidth=0.8,
        alpha=0.7,
        label="scene, with its 1σ error bar from the gradient",
    )
    right.axhline(0, color="k", lw=1.2, zorder=3, label="no error")
    right.set(
        xlabel=true_label,
        ylabel="retrieval error α̂ − α (DU)",
        title="Retrieval error, growing with the column amount",
    )
    right.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_training(curves: dict[str, list[float]], reference: float, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for (label, losses), style in zip(curves.items(), ["-", "--", ":"]):
        ax.plot(np.arange(1, len(losses) + 1), losses, style, label=label)
    ax.axhline(reference, color="k", ls=":", lw=1.2, zorder=3, label="loss with the true k")
    ax.set(
        yscale="log",
        xlabel="optimiser step (Adam)",
        ylabel="training loss: mean squared error of α̂ (DU²)",
        title=f"Learning the absorption coefficients k from {N_TRAIN:,} scenes",
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- the whole example ---------------------------------------------------------------


def run(outdir: pathlib.Path) -> dict[str, Any]:
    """All stages, in float64; returns the numbers and arrays (see `main`)."""
    rng = np.random.default_rng(17)
    alpha, y = simulate(rng, N_TEST)
    alpha_train, y_train = simulate(rng, N_TRAIN)
    true_log_k = jnp.log(jnp.asarray(K))
    log_k0 = starting_log_k(rng)

    one = stage1(alpha, y)

    start_rmse = rmse(jax.vmap(rebuilt_pipeline(BandInversion(log_k0)))(y), alpha)
    module, curve_module = train(BandInversion(log_k0), loss_of_module, y_train, alpha_train)
    rmse_module = rmse(jax.vmap(rebuilt_pipeline(module))(y), alpha)

    pipeline0 = JaxSequential([Invert(log_k0), Combine(log_k0)])
    pipeline, curve_pipeline = train(pipeline0, loss_of_pipeline, y_train, alpha_train)
    rmse_pipeline = rmse(jax.vmap(pipeline)(y), alpha)

    stored = registry_round_trip(pipeline, module, outdir / "registry")
    return {
        "stage1": one,
        "alpha": alpha,
        "start_rmse": start_rmse,
        "true_k_rmse": one["rmse"],
        "rmse_module": rmse_module,
        "rmse_pipeline": rmse_pipeline,
        "k_error_module": float(jnp.max(jnp.abs(jnp.exp(module.log_k - true_log_k) - 1))),
        "curves": {
            "k in one model, shared by both steps (stage 2)": curve_module,
            "k in each step of the pipeline (stage 3)": curve_pipeline,
        },
        "true_k_loss": float(loss_of_module(BandInversion(true_log_k), y_train, alpha_train)),
        "tied_gradient_error": tied_gradient_error(log_k0, y_train, alpha_train),
        "registry": stored,
        "plume": plume(),
        "ode": ode_check(),
    }


def main(outdir: pathlib.Path) -> dict[str, Any]:
    """Run every stage, print a table, save two plots; return the measured numbers."""
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with jax.enable_x64(True):
        r = run(outdir)
        one = r["stage1"]
        alpha_png = outdir / "retrieval_alpha.png"
        training_png = outdir / "retrieval_training.png"
        plot_retrieval(r["alpha"], one["estimate"], one["sigma"], alpha_png)
        plot_training(r["curves"], r["true_k_loss"], training_png)

    ode, plume_r, reg = r["ode"], r["plume"], r["registry"]
    rows = [
        ("1", "jit vs eager, max |difference| (DU)", f"{one['jit_vs_eager']:.1e}", "< 1e-12"),
        ("1", f"RMSE over {N_TEST} test scenes (DU)", f"{one['rmse']:.3f}", "0.20-0.32"),
        ("1", "RMS of the error bars σ‖∇_y α̂‖ (DU)", f"{one['rms_sigma']:.3f}", "≈ RMSE"),
        ("1", "RMS of error / error bar", f"{one['rms_standardised']:.3f}", "0.9-1.1"),
        ("2", "test RMSE at the start, k off ≤ 10 % (DU)", f"{r['start_rmse']:.3f}", "> 2x true k"),
        ("2", "test RMSE with the true k (DU)", f"{r['true_k_rmse']:.3f}", ""),
        ("2", "test RMSE, k learned in one model (DU)", f"{r['rmse_module']:.3f}", "≈ true k"),
        ("2", "largest error left in a learned k", f"{100 * r['k_error_module']:.1f} %", ""),
        ("3", "test RMSE, k learned per step (DU)", f"{r['rmse_pipeline']:.3f}", "≈ true k"),
        ("3", "shared vs per-step gradient, relative", f"{r['tied_gradient_error']:.1e}", "< 1e-9"),
        ("4", "weights byte-identical via registry", str(reg["weights_identical"]), "True"),
        ("4", "truncated scan k=3: nonzero ∂c_T/∂q_t", str(plume_r["nonzero_truncated"]), "3"),
        ("4", "truncated scan k=24: ∂c_T/∂q_0", f"{plume_r['dcT_dq0']:.4f}", "0.9^23 = 0.0886"),
    ]
    rows += [
        (
            "4",
            f"ODE, {name.replace('_', ' ')} adjoint: c(1 h), ∂c/∂c0",
            f"{ode['values'][name]:.4f}, {g:.6f}",
            "77.8801, e^-0.25",
        )
        for name, g in ode["grads"].items()
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    header = ("stage", "quantity", "measured", "expected")
    widths = [max(w, len(h)) for w, h in zip(widths, header)]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    print(f"\nplots: {alpha_png}\n       {training_png}")
    print(f"registry entry {reg['ref'][:12]} under {outdir / 'registry'}")
    print(f"({time.perf_counter() - start:.1f} s)")

    return {
        "jit_vs_eager": one["jit_vs_eager"],
        "rmse": one["rmse"],
        "rms_sigma": one["rms_sigma"],
        "rms_standardised": one["rms_standardised"],
        "start_rmse": r["start_rmse"],
        "true_k_rmse": r["true_k_rmse"],
        "rmse_module": r["rmse_module"],
        "rmse_pipeline": r["rmse_pipeline"],
        "k_error_module": r["k_error_module"],
        "tied_gradient_error": r["tied_gradient_error"],
        "weights_identical": reg["weights_identical"],
        "reloaded_max_abs_difference": reg["max_abs_difference"],
        "module_identical": reg["module_identical"],
        "state_json": reg["state_json"],
        "truncated_nonzero_k3": plume_r["nonzero_truncated"],
        "truncated_dcT_dq0_k24": plume_r["dcT_dq0"],
        "truncated_forward_identical": plume_r["forward_identical"],
        "ode_values": ode["values"],
        "ode_grads": ode["grads"],
        "final_loss": {name: curve[-1] for name, curve in r["curves"].items()},
        "plots": [str(alpha_png), str(training_png)],
    }


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "out"))
