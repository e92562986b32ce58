"""`Component`: a JAX function or pipeline with typed inputs and outputs and five
autodiff endpoints."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import equinox as eqx
import jax
import numpy as np
import pydantic

from gradpipe.core import Operator

from ._casting import Casting, check_casting
from ._derivative_passes import DerivativePasses
from ._derivatives import DERIVATIVE_ERRORS, DerivativeMemory
from ._endpoints import Programs, Signature
from ._keys import ContentKey
from ._nodes import LeafSpec, leaf_specs, model_node
from ._paths import ComponentInputError
from ._recompute import check_residuals
from ._residuals import CacheLimits, ResidualCache, Residuals
from ._strict import Extra, check_extra, check_given
from ._tree import FlatInputs, flatten_inputs, on_device, rebuild, validation_error
from ._vectors import fill, inexact, vectors

__all__ = ["Component"]


class Component:
    """A JAX function or gradpipe pipeline served with typed inputs and outputs and
    five endpoints: `apply`, `jacobian`, `jvp`, `vjp` and `abstract_eval`.

    **How ``fn`` is called.** ``fn`` receives the validated input as a nested dict
    (models become dicts, lists stay lists, array fields are JAX arrays or tracers,
    static fields keep their Python values) and returns a dict (or model instance)
    shaped like the output model. Two shortcuts make a pipeline a component with no
    extra code: an `Operator` (a `Sequential`, a `JaxSequential`, ...) given an input
    model with exactly one field receives that field's value positionally; and when
    the output model has exactly one field, a return value that is not a dict is that
    field's value.

    **Paths.** Gradient endpoints address leaves by path: ``x``, ``layer.w``,
    ``layers[0].w``, ``bands[red]`` (see `gradpipe.component`). They accept only
    `Differentiable` array leaves. Tangents and cotangents are dicts from path to
    array, shape-checked against the leaf. Results are dicts keyed by the paths as
    the caller wrote them. Derivatives with respect to or of integer and bool arrays
    are NumPy zeros of dtype ``jax.dtypes.float0``.

    **Compilation.** Static inputs are part of the compiled function, never traced.
    Each endpoint compiles once per (input structure and static values, array shapes
    and dtypes, sorted path sets) and reuses the compiled function afterwards.

    **Residual cache** (on by default). `apply` runs the forward pass through
    ``jax.vjp`` and keeps the residuals under an exact key of the whole input
    (`ContentKey`: bitwise on the arrays, typed on static values); a following `vjp`
    on the same input runs only the jitted backward pass. The cache belongs to this
    component, is thread-safe, and is bounded by `CacheLimits`. The same compiled
    programs run with the cache on or off, so every result is bitwise the same either
    way; ``residual_cache=False`` only stops residuals from being kept between calls
    (and a `vjp` then runs the forward pass again). Use `apply_keep` and `vjp_from`
    to hold residuals yourself.

    **Which residuals.** By default (``residuals="auto"``) the forward pass keeps the
    outputs of costly operations (matrix products, loops, solves) and the compiled
    backward pass recomputes elementwise arithmetic and layout changes from them
    (``jax.checkpoint``): cheaper to redo than to write to fresh memory and hold. A
    function with side effects, host callbacks or `gradpipe.ooc` operations (also
    inside custom derivative rules) keeps everything, so its callbacks fire once per
    forward pass. ``"all"`` keeps every
    residual, ``"inputs"`` only the inputs (the backward pass reruns the forward
    pass), and any ``jax.checkpoint`` policy may be given instead.

    **Input the caller did not mean is refused.** A field the input model does not
    declare (at any depth) is refused, naming it, unless the component is built with
    ``extra="ignore"`` (or the model itself sets ``extra``). A value is cast to its
    field's dtype only when the cast keeps it (see the casting table of the
    components guide): ``1e40`` for a float32 field, ``-1`` for a uint8 one, ``1.5``
    for an int one, ``True`` for a number, or ``"2"`` for a static ``int`` is refused
    unless the component is built with ``casting="unchecked"``.

    **What may fail where.** `apply` runs whatever ``jax.jit`` runs: when the forward
    pass cannot be differentiated (a host callback without a derivative rule), it
    runs without keeping residuals. Only the derivative endpoints (`vjp`, `jvp`,
    `jacobian`, `apply_keep`) refuse such a function, with a `TypeError` naming the
    endpoint and JAX's reason. ``jacobian(mode="auto")`` uses reverse mode for a
    function with only a reverse-mode rule (``jax.custom_vjp``).

    **Arguments:**

    - `fn`: a JAX-traceable callable (see above).
    - `inputs`, `outputs`: pydantic models built from `Array`, `Differentiable`,
      nested models, lists and dicts of them, and plain static fields (inputs only).
      A 64-bit array field (float64, int64, ...) needs JAX's 64-bit types on when
      the component is called; with them off a call is refused rather than computed
      in 32 bits.
    - `residual_cache`: ``True`` (default limits), ``False``, or a `CacheLimits`.
    - `residuals`: ``"auto"`` (default), ``"all"``, ``"inputs"`` or a
      ``jax.checkpoint`` policy (see above).
    - `extra`: ``"forbid"`` (default) refuses unknown input fields; ``"ignore"``
      drops them.
    - `casting`: ``"checked"`` (default) refuses casts that change a value;
      ``"unchecked"`` casts as NumPy's ``astype`` and pydantic's lax mode do.

    ```python
    class In(pydantic.BaseModel):
        x: Differentiable[Array[np.float32, (None,)]]
        n: int

    class Out(pydantic.BaseModel):
        y: Differentiable[Array[np.float32, (None,)]]

    comp = Component(lambda d: {"y": jnp.sin(d["x"]) ** d["n"]}, inputs=In, outputs=Out)
    comp.apply({"x": [0.1, 0.2], "n": 2})["y"]
    comp.vjp({"x": [0.1, 0.2], "n": 2}, ["x"], ["y"], {"y": [1.0, 1.0]})["x"]
    ```
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        inputs: type[pydantic.BaseModel],
        outputs: type[pydantic.BaseModel],
        residual_cache: bool | CacheLimits = True,
        residuals: Literal["auto", "all", "inputs"] | Callable[..., bool] = "auto",
        extra: Extra = "forbid",
        casting: Casting = "checked",
    ) -> None:
        if not callable(fn):
            raise TypeError(f"Component needs a callable fn, got {type(fn).__name__}.")
        for name, model in (("inputs", inputs), ("outputs", outputs)):
            if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
                raise TypeError(f"Component {name}= must be a pydantic.BaseModel subclass.")
        self.fn = fn
        self.input_model = inputs
        self.output_model = outputs
        self._in_node = model_node(inputs)
        self._out_node = model_node(outputs)
        static_out = [s.path for s in leaf_specs(self._out_node) if s.kind != "array"]
        if static_out:
            raise TypeError(f"Output fields must be arrays (Array[...]); {static_out[0]!r} is not.")
        check_residuals(residuals)
        check_extra(extra)
        check_casting(casting)
        self.residuals = residuals
        self.extra = extra
        self.casting = casting
        self._learned = DerivativeMemory()  # what JAX could not differentiate, per call
        if residual_cache is True:
            residual_cache = CacheLimits()
        self.residual_cache: ResidualCache | None = (
            ResidualCache(residual_cache) if isinstance(residual_cache, CacheLimits) else None
        )
        self._params, static_fn = eqx.partition(fn, eqx.is_array)
        in_fields = list(inputs.model_fields)
        out_fields = list(outputs.model_fields)
        positional = in_fields[0] if isinstance(fn, Operator) and len(in_fields) == 1 else None
        only_output = out_fields[0] if len(out_fields) == 1 else None

        def call(params: Any, tree: dict[str, Any]) -> Any:
            f = eqx.combine(params, static_fn)
            result = f(tree[positional]) if positional is not None else f(tree)
            if only_output is not None and not isinstance(result, Mapping | pydantic.BaseModel):
                result = {only_output: result}
            return result

        self._programs = Programs(call, self._in_node, self._out_node, residuals)
        self._passes = DerivativePasses(self._programs, self._params, self._learned)

    def __repr__(self) -> str:
        name = getattr(self.fn, "__name__", type(self.fn).__name__)
        return (
            f"Component({name}, inputs={self.input_model.__name__}, "
            f"outputs={self.output_model.__name__})"
        )

    # -- schema ------------------------------------------------------------------

    def input_spec(self) -> list[LeafSpec]:
        """Every input leaf: path pattern, kind, dtype, shape, differentiability."""
        return leaf_specs(self._in_node)

    def output_spec(self) -> list[LeafSpec]:
        """Every output leaf, as `input_spec`."""
        return leaf_specs(self._out_node)

    # -- endpoints ---------------------------------------------------------------

    def apply(self, inputs: Mapping[str, Any] | pydantic.BaseModel) -> dict[str, Any]:
        """Run the function. **Returns** the outputs as a nested dict of JAX arrays,
        without waiting for them (NumPy inputs are copied first).

        With the residual cache on, the residuals are kept for a following `vjp`.
        """
        _, flat, sig = self._prepare(inputs, host=True)
        cache = self.residual_cache if sig.diff_in and sig.diff_out else None
        # The key outlives this call, so it holds private copies of NumPy inputs; they
        # are also what goes to the device (no second copy).
        key = None if cache is None else ContentKey(flat.structure, flat.arrays).private()
        arrays = on_device(flat.arrays) if key is None else on_device(key.arrays, private=False)
        if not (sig.diff_in and sig.diff_out):
            leaves = self._programs.apply(sig)(self._params, arrays)
            return rebuild(self._out_node, sig.out_structure, leaves)
        # Whether this input is kept already is asked before the forward pass runs, so
        # that the comparison does not compete with it for the processor.
        twin = None if cache is None or key is None else cache.twin(key)
        # The same compiled forward pass runs whether the cache is on or off, so that
        # the cache never changes a single bit of any result. A forward pass that
        # cannot run under jax.vjp (a callback without a derivative rule) runs plainly:
        # apply runs whatever jax.jit runs.
        if sig.key in self._learned.no_residuals:
            leaves = self._programs.apply(sig)(self._params, arrays)
            return rebuild(self._out_node, sig.out_structure, leaves)
        try:
            leaves, vjp_fn = self._programs.keep(sig)(self._params, arrays)
        except DERIVATIVE_ERRORS as error:
            leaves = self._programs.apply(sig)(self._params, arrays)
            self._learned.remember(self._learned.no_residuals, sig.key, error)
            return rebuild(self._out_node, sig.out_structure, leaves)
        if cache is not None and key is not None and not cache.touch(twin):
            cache.put(key, Residuals(self, sig, vjp_fn), look=False)
        return rebuild(self._out_node, sig.out_structure, leaves)

    def apply_keep(
        self, inputs: Mapping[str, Any] | pydantic.BaseModel
    ) -> tuple[dict[str, Any], Residuals]:
        """Run the function and keep the residuals of its backward pass (whatever the
        cache setting). **Returns** ``(outputs, residuals)``; pass the residuals to
        `vjp_from` of this component."""
        _, flat, sig = self._prepare(inputs)
        if not (sig.diff_in and sig.diff_out):
            leaves = self._programs.apply(sig)(self._params, flat.arrays)
            return rebuild(self._out_node, sig.out_structure, leaves), Residuals(self, sig, None)
        leaves, vjp_fn = self._passes.keep(sig, flat.arrays, "apply_keep")
        return rebuild(self._out_node, sig.out_structure, leaves), Residuals(self, sig, vjp_fn)

    def vjp(
        self,
        inputs: Mapping[str, Any] | pydantic.BaseModel,
        vjp_inputs: list[str],
        vjp_outputs: list[str],
        cotangents: Mapping[str, Any],
    ) -> dict[str, Any]:
        """The vector-Jacobian product: ``cotangents`` (keyed by output path) pulled back
        to the inputs ``vjp_inputs``. **Returns** ``{input path: array}``.

        A cache hit runs only the backward pass. A miss runs the same forward pass as
        `apply` and then the same backward pass, and keeps the residuals for the next
        call on this input. Waits for the result.
        """
        # NumPy inputs stay on the host: a hit compares them there and sends nothing
        # to the device but the cotangents, since the residuals hold the rest.
        _, flat, sig = self._prepare(inputs, host=True)
        ins = sig.select(vjp_inputs, "input", "vjp input")
        outs = sig.select(vjp_outputs, "output", "vjp output")
        given = vectors(sig, outs, cotangents, "output", "cotangent", self.casting)
        if not (inexact(ins, sig.diff_in) and inexact(outs, sig.diff_out)):
            return fill(ins, {}, sig.in_avals)
        cache = self.residual_cache
        key = None if cache is None else ContentKey(flat.structure, flat.arrays)
        residuals = None if cache is None or key is None else cache.get(key)
        if residuals is None:
            if key is not None:
                # The key outlives this call, so it keeps private copies of NumPy
                # inputs, which also go to the device.
                key = key.private()
                arrays = on_device(key.arrays, private=False)
            else:
                arrays = on_device(flat.arrays, private=False)  # we wait for the result
            _, vjp_fn = self._passes.keep(sig, arrays, "vjp")
            residuals = Residuals(self, sig, vjp_fn)
            if cache is not None and key is not None:
                cache.put(key, residuals)
        # The device arrays may share the caller's buffers until the result is ready.
        return jax.block_until_ready(self._passes.pull(residuals, ins, outs, given))

    def vjp_from(
        self,
        residuals: Residuals,
        vjp_inputs: list[str],
        vjp_outputs: list[str],
        cotangents: Mapping[str, Any],
    ) -> dict[str, Any]:
        """`vjp` from the residuals `apply_keep` returned: only the backward pass runs.
        Waits for the result."""
        if not isinstance(residuals, Residuals) or residuals._owner is not self:
            raise ValueError("vjp_from takes the residuals of this component's apply_keep.")
        if any(
            a.is_deleted() for a in jax.tree.leaves(residuals._vjp_fn) if isinstance(a, jax.Array)
        ):
            raise ValueError(
                "These residuals hold a deleted device buffer (an input array passed to "
                "apply_keep was deleted or donated since); call apply_keep again."
            )
        sig = residuals._signature
        ins = sig.select(vjp_inputs, "input", "vjp input")
        outs = sig.select(vjp_outputs, "output", "vjp output")
        given = vectors(sig, outs, cotangents, "output", "cotangent", self.casting)
        return jax.block_until_ready(self._passes.pull(residuals, ins, outs, given, "vjp_from"))

    def jvp(
        self,
        inputs: Mapping[str, Any] | pydantic.BaseModel,
        jvp_inputs: list[str],
        jvp_outputs: list[str],
        tangents: Mapping[str, Any],
    ) -> dict[str, Any]:
        """The Jacobian-vector product: ``tangents`` (keyed by input path) pushed
        forward to the outputs ``jvp_outputs``. **Returns** ``{output path: array}``
        (waits for it)."""
        _, flat, sig = self._prepare(inputs, private=False)
        ins = sig.select(jvp_inputs, "input", "jvp input")
        outs = sig.select(jvp_outputs, "output", "jvp output")
        given = vectors(sig, ins, tangents, "input", "tangent", self.casting)
        return jax.block_until_ready(self._passes.push(sig, flat.arrays, ins, outs, given))

    def jacobian(
        self,
        inputs: Mapping[str, Any] | pydantic.BaseModel,
        jac_inputs: list[str],
        jac_outputs: list[str],
        mode: Literal["auto", "fwd", "rev"] = "auto",
    ) -> dict[str, dict[str, Any]]:
        """The Jacobian blocks ``{output path: {input path: array}}``, each of shape
        ``output.shape + input.shape``. ``mode="auto"`` uses forward mode when the
        chosen inputs have no more elements than the chosen outputs, else reverse."""
        if mode not in ("auto", "fwd", "rev"):
            raise ValueError(f"jacobian mode must be 'auto', 'fwd' or 'rev', got {mode!r}.")
        _, flat, sig = self._prepare(inputs, private=False)
        ins = sig.select(jac_inputs, "input", "jacobian input")
        outs = sig.select(jac_outputs, "output", "jacobian output")
        return jax.block_until_ready(self._passes.jacobian(sig, flat.arrays, ins, outs, mode))

    def abstract_eval(self, abstract_inputs: Mapping[str, Any]) -> dict[str, Any]:
        """The output shapes and dtypes for inputs given by shape and dtype: array
        leaves of ``abstract_inputs`` are ``{"shape": [...], "dtype": "float32"}``,
        static leaves are values. Nothing is computed. **Returns** the outputs with
        ``{"shape": [...], "dtype": "..."}`` at every array leaf."""
        if isinstance(abstract_inputs, Mapping):
            check_given(self._in_node, abstract_inputs, extra=self.extra, casting=self.casting)
        flat = flatten_inputs(self._in_node, abstract_inputs, abstract=True, casting=self.casting)
        sig = self._programs.signature(
            self._params, flat.structure, flat.arrays, flat.paths, flat.nodes
        )
        leaves = [{"shape": list(a.shape), "dtype": np.dtype(a.dtype).name} for a in sig.out_avals]
        return rebuild(self._out_node, sig.out_structure, leaves)

    # -- helpers -----------------------------------------------------------------

    def _prepare(
        self, inputs: Any, private: bool = True, host: bool = False
    ) -> tuple[pydantic.BaseModel, FlatInputs, Signature]:
        if isinstance(inputs, self.input_model):
            model = inputs
        elif isinstance(inputs, Mapping):
            check_given(self._in_node, inputs, extra=self.extra, casting=self.casting)
            try:
                model = self.input_model.model_validate(inputs, context={"casting": self.casting})
            except pydantic.ValidationError as error:
                raise validation_error(self._in_node, error) from None
        else:
            raise ComponentInputError(
                "",
                f"Inputs must be a dict or a {self.input_model.__name__} instance, "
                f"got {type(inputs).__name__}.",
            )
        flat = flatten_inputs(self._in_node, model, private=private, host=host)
        sig = self._programs.signature(
            self._params, flat.structure, flat.arrays, flat.paths, flat.nodes
        )
        return model, flat, sig
