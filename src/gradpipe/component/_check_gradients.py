"""`check_gradients`: a component's `jvp` and `vjp` against central differences of its
`apply`, on given or random inputs."""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pydantic

from ._component import Component
from ._gradient_report import GradientCheck, GradientCheckRow
from ._nodes import model_node
from ._paths import canonical_path
from ._random_inputs import random_inputs
from ._schema import is_inexact
from ._tree import flatten_inputs, flatten_outputs, rebuild

__all__ = ["check_gradients"]

ENDPOINTS = ("jvp", "vjp")
# How many times the rounding error of a difference quotient the default atol allows.
_ROUNDING_MARGIN = 10.0

# One direction tried from an input path: the corrected direction, the quotient of each
# output, and its rounding error.
_Probe = tuple[np.ndarray, list[np.ndarray], list[float]]
# (absolute error, scale, rounding noise) of one direction.
_Error = tuple[float, float, float]


def check_gradients(
    component: Component,
    inputs: Mapping[str, Any] | pydantic.BaseModel | None = None,
    *,
    input_paths: Sequence[str] | None = None,
    output_paths: Sequence[str] | None = None,
    endpoints: Sequence[str] = ("jvp", "vjp"),
    directions: int = 3,
    step: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
    size: int = 4,
) -> GradientCheck:
    """Compare a component's `jvp` and `vjp` with central differences of its `apply`.

    For each differentiable input path, `directions` random directions ``t`` (of
    largest entry 1) are tried. The difference quotient ``(f(x + h t) - f(x - h t)) /
    2h`` of every output is compared with the `jvp` of ``t``; for the `vjp`, a random
    cotangent ``u`` of each output is pulled back to ``g`` and ``<g, t>`` is compared
    with ``<u, (f(x + h t) - f(x - h t)) / 2h>``. Each pair (input path, output path,
    endpoint) is one row of the result's table.

    **Precision.** The differences are taken in float64 (NumPy) and the perturbed
    points rounded to the input's dtype, with the direction corrected for that
    rounding, so only the component's own arithmetic limits them. The check runs
    with JAX's 64-bit types on when the component allows it (its `apply` runs with
    them on), so that float64 fields compute in float64; a float32 field computes in
    float32, and the default step and tolerance follow the dtypes involved.

    **Tolerance.** A row passes when, for every direction, the error is at most
    ``atol + rtol * scale``, where ``scale`` is the size of the derivative compared
    (the largest entry of the difference quotient or of the `jvp`; for the `vjp`,
    the larger of ``sum |u * quotient|`` and ``sum |g * t|``), so `rtol` is a
    relative error of the block as a whole, not of each entry. `rel_error` in the
    table is the error over ``scale``. ``atol`` defaults to ten times the rounding
    error of the quotient (``eps * max |f| / h``), which only matters for blocks
    whose derivative is near zero.

    **Arguments:**

    - `component`: the `Component` to check.
    - `inputs`: where to take the derivatives; `None` draws them from the input
      model (see `random_inputs`).
    - `input_paths`, `output_paths`: the leaves to check; all differentiable
      floating leaves by default.
    - `endpoints`: ``"jvp"``, ``"vjp"`` or both.
    - `directions`: random directions per input path.
    - `step`: the relative step; ``h = step * max(1, max |x|)`` for each input.
      Defaults to ``eps ** (1/3)`` of the least precise dtype of that input and the
      outputs, the step that balances truncation and rounding.
    - `rtol`: defaults to ``eps ** (1/3)`` of the same dtypes (about 5e-3 for
      float32, 6e-6 for float64).
    - `atol`: see above.
    - `seed`: seeds the directions, cotangents and drawn inputs.
    - `size`: the length of each axis declared ``None`` when inputs are drawn.

    **Returns:** a `GradientCheck`; ``print`` it for the table, `passed` says whether
    every row is within tolerance.
    """
    if directions < 1:
        raise ValueError(f"directions must be at least 1, got {directions}.")
    unknown = sorted(set(endpoints) - set(ENDPOINTS))
    if unknown or not endpoints:
        raise ValueError(f"endpoints must be among {list(ENDPOINTS)}, got {list(endpoints)}.")
    if step is not None and not step > 0:
        raise ValueError(f"step must be positive, got {step}.")
    if not isinstance(component, Component):
        raise TypeError(f"check_gradients takes a Component, got {type(component).__name__}.")
    rng = np.random.default_rng(seed)
    if inputs is None:
        inputs = random_inputs(component, seed=seed, size=size)
    with _precision(component, inputs) as x64:
        checker = _Checker(component, inputs, rng, step, rtol, atol)
        ins = checker.select(input_paths, "input")
        outs = checker.select(output_paths, "output")
        rows = checker.run(ins, outs, tuple(e for e in ENDPOINTS if e in endpoints), directions)
    return GradientCheck(tuple(rows), checker.nested, seed, directions, x64)


@contextlib.contextmanager
def _precision(component: Component, inputs: Any) -> Iterator[bool]:
    """JAX's 64-bit types on for the check when the component's `apply` runs with
    them; otherwise as they were. Yields whether they are on."""
    if jax.config.read("jax_enable_x64"):  # the same value as jax.config.jax_enable_x64
        yield True
        return
    with jax.enable_x64(True):
        try:
            jax.block_until_ready(component.apply(inputs))
        except Exception:  # any failure means: not under x64
            allowed = False
        else:
            allowed = True
    if not allowed:
        yield False
        return
    with jax.enable_x64(True):
        yield True


class _Checker:
    """The inputs as flat NumPy leaves, the differentiable paths, and the comparisons."""

    def __init__(
        self,
        component: Component,
        inputs: Mapping[str, Any] | pydantic.BaseModel,
        rng: np.random.Generator,
        step: float | None,
        rtol: float | None,
        atol: float | None,
    ) -> None:
        self.component, self.rng = component, rng
        self.step, self.rtol, self.atol = step, rtol, atol
        self.in_node = model_node(component.input_model)
        self.out_node = model_node(component.output_model)
        outputs = component.apply(inputs)
        model = (
            inputs
            if isinstance(inputs, component.input_model)
            else component.input_model.model_validate(
                inputs, context={"casting": component.casting}
            )
        )
        flat = flatten_inputs(self.in_node, model, host=True)
        self.structure = flat.structure
        self.base = [np.asarray(a) for a in flat.arrays]
        self.nested = rebuild(self.in_node, flat.structure, self.base)
        _, out_paths, leaves, out_nodes = flatten_outputs(self.out_node, outputs)
        self.in_leaves = {
            p: i
            for i, (p, n, a) in enumerate(zip(flat.paths, flat.nodes, self.base))
            if n.differentiable and is_inexact(a.dtype)
        }
        self.out_dtypes = [np.dtype(leaf.dtype) for leaf in leaves]
        self.out_shapes = {p: tuple(leaf.shape) for p, leaf in zip(out_paths, leaves)}
        self.out_leaves = {
            p: i
            for i, (p, n, d) in enumerate(zip(out_paths, out_nodes, self.out_dtypes))
            if n.differentiable and is_inexact(d)
        }

    def select(self, paths: Sequence[str] | None, side: str) -> list[str]:
        known = self.in_leaves if side == "input" else self.out_leaves
        if paths is None:
            if not known:
                raise ValueError(f"The component has no differentiable floating {side} leaves.")
            return list(known)
        chosen = []
        for given in paths:
            path = canonical_path(given, what=f"{side} path")
            if path not in known:
                close = difflib.get_close_matches(path, list(known), n=3)
                hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
                raise ValueError(
                    f"{given!r} is not a differentiable floating {side} path of these inputs."
                    f"{hint} The {side} paths: {', '.join(map(repr, known)) or 'none'}."
                )
            if path not in chosen:
                chosen.append(path)
        return chosen

    def _outputs(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        outputs = self.component.apply(rebuild(self.in_node, self.structure, arrays))
        leaves = flatten_outputs(self.out_node, outputs)[2]
        return [np.asarray(leaf, dtype=np.float64) for leaf in leaves]

    def run(
        self, ins: Sequence[str], outs: Sequence[str], endpoints: Sequence[str], directions: int
    ) -> list[GradientCheckRow]:
        out_index = [self.out_leaves[o] for o in outs]
        # Per input path and direction: the corrected direction, the quotient of each
        # output, and its rounding error.
        probes: dict[str, list[_Probe]] = {}
        for path in ins:
            i = self.in_leaves[path]
            x = self.base[i]
            eps = _eps([x.dtype, *(self.out_dtypes[o] for o in out_index)])
            relative = self.step if self.step is not None else eps ** (1 / 3)
            h = relative * max(1.0, float(np.max(np.abs(x), initial=0.0)))
            probes[path] = []
            for _ in range(directions):
                t = self.rng.standard_normal(x.shape)
                t /= max(float(np.max(np.abs(t), initial=0.0)), 1e-300)
                plus, minus = list(self.base), list(self.base)
                plus[i] = (x.astype(np.float64) + h * t).astype(x.dtype)
                minus[i] = (x.astype(np.float64) - h * t).astype(x.dtype)
                t = (plus[i].astype(np.float64) - minus[i].astype(np.float64)) / (2 * h)
                f_plus, f_minus = self._outputs(plus), self._outputs(minus)
                quotients = [(f_plus[o] - f_minus[o]) / (2 * h) for o in out_index]
                rounding = [
                    float(_eps([self.out_dtypes[o]]))
                    * max(_max_abs(f_plus[o]), _max_abs(f_minus[o]))
                    / h
                    for o in out_index
                ]
                probes[path].append((t, quotients, rounding))
        results: dict[tuple[str, str, str], GradientCheckRow] = {}
        if "jvp" in endpoints:
            self._check_jvp(ins, outs, probes, results)
        if "vjp" in endpoints:
            self._check_vjp(ins, outs, probes, results)
        return [results[(i, o, e)] for i in ins for o in outs for e in endpoints]

    def _rtol(self, path_in: str, path_out: str) -> float:
        if self.rtol is not None:
            return self.rtol
        i, o = self.in_leaves[path_in], self.out_leaves[path_out]
        return float(_eps([self.base[i].dtype, self.out_dtypes[o]]) ** (1 / 3))

    def _zeros(self, paths: Sequence[str], side: str) -> dict[str, np.ndarray]:
        if side == "input":
            return {p: np.zeros_like(self.base[self.in_leaves[p]]) for p in paths}
        return {p: np.zeros(self.out_shapes[p], self.out_dtypes[self.out_leaves[p]]) for p in paths}

    def _check_jvp(
        self,
        ins: Sequence[str],
        outs: Sequence[str],
        probes: dict[str, list[_Probe]],
        results: dict[tuple[str, str, str], GradientCheckRow],
    ) -> None:
        # One jvp over every chosen input, the others' tangents zero: one compiled
        # program serves all input paths. Forward mode may fail for some of them
        # (a jax.custom_vjp on the way); then each path, and each output, on its own.
        joint = True
        for path in ins:
            errors: dict[str, list[_Error]] = {o: [] for o in outs}
            notes = dict.fromkeys(outs, "")
            for t, quotients, rounding in probes[path]:
                tangent = t.astype(self.base[self.in_leaves[path]].dtype)
                pushed = None
                if joint:
                    try:
                        tangents = {**self._zeros(ins, "input"), path: tangent}
                        pushed = self.component.jvp(self.nested, list(ins), list(outs), tangents)
                    except TypeError:
                        joint = False
                if pushed is None:
                    reached = [o for o in outs if not notes[o]]
                    pushed = self._pushed(path, reached, {path: tangent}, notes)
                for o, quotient, noise in zip(outs, quotients, rounding):
                    if o not in pushed:
                        continue
                    jvp = np.asarray(pushed[o], dtype=np.float64)
                    err = _max_abs(jvp - quotient)
                    scale = max(_max_abs(jvp), _max_abs(quotient))
                    errors[o].append((err, scale, noise))
            for o in outs:
                results[(path, o, "jvp")] = self._row(path, o, "jvp", errors[o], notes[o])

    def _pushed(
        self, path: str, outs: list[str], tangent: dict[str, np.ndarray], notes: dict[str, str]
    ) -> dict[str, Any]:
        """The `jvp` to every output in ``outs`` that forward mode reaches; when it fails
        for them together, each on its own, the reason noted for those it cannot reach."""
        if not outs:
            return {}
        try:
            return self.component.jvp(self.nested, [path], outs, tangent)
        except TypeError as error:
            if len(outs) == 1:
                notes[outs[0]] = _unavailable(error)
                return {}
        pushed: dict[str, Any] = {}
        for o in outs:
            pushed.update(self._pushed(path, [o], tangent, notes))
        return pushed

    def _check_vjp(
        self,
        ins: Sequence[str],
        outs: Sequence[str],
        probes: dict[str, list[_Probe]],
        results: dict[tuple[str, str, str], GradientCheckRow],
    ) -> None:
        # As for the jvp: one vjp from every chosen output, the others' cotangents zero,
        # unless reverse mode fails for some; then each output on its own.
        errors: dict[tuple[str, str], list[_Error]] = {(i, o): [] for i in ins for o in outs}
        notes = dict.fromkeys(outs, "")
        joint = True
        for k in range(len(probes[ins[0]])):
            for n, o in enumerate(outs):
                if notes[o]:
                    continue
                dtype = self.out_dtypes[self.out_leaves[o]]
                cotangent = self.rng.standard_normal(self.out_shapes[o]).astype(dtype)
                u = cotangent.astype(np.float64)
                pulled = None
                if joint:
                    try:
                        cotangents = {**self._zeros(outs, "output"), o: cotangent}
                        pulled = self.component.vjp(self.nested, list(ins), list(outs), cotangents)
                    except TypeError:
                        joint = False
                if pulled is None:
                    try:
                        pulled = self.component.vjp(self.nested, list(ins), [o], {o: cotangent})
                    except TypeError as error:
                        notes[o] = _unavailable(error)
                        continue
                for path in ins:
                    t, quotients, rounding = probes[path][k]
                    g = np.asarray(pulled[path], dtype=np.float64)
                    pulled_dot, pushed_dot = np.sum(g * t), np.sum(u * quotients[n])
                    scale = max(np.sum(np.abs(g * t)), np.sum(np.abs(u * quotients[n])))
                    noise = float(np.sum(np.abs(u))) * rounding[n]
                    errors[(path, o)].append((abs(pulled_dot - pushed_dot), scale, noise))
        for path in ins:
            for o in outs:
                results[(path, o, "vjp")] = self._row(path, o, "vjp", errors[(path, o)], notes[o])

    def _row(
        self, path_in: str, path_out: str, endpoint: str, errors: list[_Error], note: str
    ) -> GradientCheckRow:
        rtol = self._rtol(path_in, path_out)
        if not errors:
            return GradientCheckRow(
                path_in, path_out, endpoint, np.nan, np.nan, rtol, np.nan, None, note
            )
        err, scale, noise = (np.array(column, dtype=np.float64) for column in zip(*errors))
        atol = np.full_like(noise, self.atol) if self.atol is not None else _ROUNDING_MARGIN * noise
        within = err <= atol + rtol * scale  # False where anything is NaN
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(err == 0, 0.0, err / scale)
        finite = bool(np.all(np.isfinite(err)))
        return GradientCheckRow(
            path_in,
            path_out,
            endpoint,
            float(np.max(err)),
            float(np.max(rel)),
            rtol,
            float(np.max(atol)),
            bool(np.all(within)),
            "" if finite else "not finite",
        )


def _eps(dtypes: Sequence[Any]) -> float:
    return max(float(jnp.finfo(d).eps) for d in dtypes)


def _max_abs(a: np.ndarray) -> float:
    return float(np.max(np.abs(a), initial=0.0))


def _unavailable(error: BaseException) -> str:
    """Why an endpoint could not run, shortly: the table prints it on the row."""
    text = str(error).strip() or type(error).__name__
    if "only a reverse-mode rule" in text:
        return "no forward mode (a jax.custom_vjp rule)"
    first = text.splitlines()[0]
    return f"not available: {first[:120]}{'...' if len(first) > 120 else ''}"
