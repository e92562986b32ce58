"""The compiled functions behind a component's endpoints.

Every endpoint runs one jitted function over the flat array leaves of its input (see
`_tree`). A `Signature` describes one kind of input — its structure (static values
included), the shapes and dtypes of its arrays, and the outputs they produce — and
each jitted function is built for one signature and one sorted selection of paths,
then kept, so calling an endpoint again on a like input does not trace the
function again. Static inputs live in the structure, never in the traced arguments.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from ._nodes import ArrayNode, LeafSpec, ModelNode, leaf_specs
from ._paths import ComponentInputError, canonical_paths
from ._recompute import has_host_effects, residual_policy
from ._schema import is_inexact
from ._tree import flatten_outputs, rebuild
from ._unselectable import unselectable_reason

__all__ = ["Programs", "Selection", "Signature"]


@dataclass(frozen=True, eq=False)
class Signature:
    """One kind of input and the outputs it gives.

    - `key`: ``(structure, ((shape, dtype), ...))``, what makes two inputs alike.
    - `in_paths`, `in_nodes`, `in_avals`: the input array leaves.
    - `out_structure`, `out_paths`, `out_nodes`, `out_avals`: the output leaves.
    - `diff_in`, `diff_out`: indices of the differentiable leaves of inexact dtype, the
      ones JAX differentiates (integer leaves get ``float0`` zeros instead).
    """

    key: Any
    in_paths: tuple[str, ...]
    in_nodes: tuple[ArrayNode, ...]
    in_avals: tuple[jax.ShapeDtypeStruct, ...]
    out_structure: Any
    out_paths: tuple[str, ...]
    out_nodes: tuple[ArrayNode, ...]
    out_avals: tuple[jax.ShapeDtypeStruct, ...]
    in_specs: tuple[LeafSpec, ...] = ()
    out_specs: tuple[LeafSpec, ...] = ()

    @property
    def diff_in(self) -> tuple[int, ...]:
        return _differentiable(self.in_nodes, self.in_avals)

    @property
    def diff_out(self) -> tuple[int, ...]:
        return _differentiable(self.out_nodes, self.out_avals)

    def select(self, paths: Any, side: str, what: str) -> Selection:
        """The leaves ``paths`` address on ``side`` ("input" or "output"), checked to
        exist and be differentiable; a `ComponentInputError` names the first bad one."""
        names, nodes, specs, others = (
            (self.in_paths, self.in_nodes, self.in_specs, self.out_paths)
            if side == "input"
            else (self.out_paths, self.out_nodes, self.out_specs, self.in_paths)
        )
        index = {p: i for i, p in enumerate(names)}
        chosen: list[tuple[str, int]] = []
        for canonical, given in sorted(canonical_paths(paths, what=what).items()):
            if canonical not in index or not nodes[index[canonical]].differentiable:
                known = [p for p, n in zip(names, nodes) if n.differentiable]
                listed = ", ".join(repr(p) for p in known[:12]) + (
                    ", ..." if len(known) > 12 else ""
                )
                reason = unselectable_reason(canonical, side, names, specs, others)
                raise ComponentInputError(
                    given,
                    f"The {what} {given!r} {reason}. Differentiable {side} paths of this "
                    f"input: {listed or 'none'}.",
                )
            chosen.append((given, index[canonical]))
        return Selection(tuple(chosen))


@dataclass(frozen=True)
class Selection:
    """Chosen leaves as ``(path as the caller wrote it, leaf index)``, in path order."""

    items: tuple[tuple[str, int], ...]

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(i for _, i in self.items)


def _differentiable(nodes: tuple[ArrayNode, ...], avals: tuple[Any, ...]) -> tuple[int, ...]:
    return tuple(
        i for i, (n, a) in enumerate(zip(nodes, avals)) if n.differentiable and is_inexact(a.dtype)
    )


class Programs:
    """The jitted functions of one component, built on first use and kept (least
    recently used dropped past `max_programs`).

    **Arguments:**

    - `call`: ``call(params, tree) -> output`` runs the component's function.
    - `in_node`, `out_node`: the model nodes of the inputs and outputs.
    - `residuals`: what the forward pass keeps for the backward pass (see
      `Component`).
    """

    def __init__(
        self,
        call: Callable[[Any, Any], Any],
        in_node: ModelNode,
        out_node: ModelNode,
        residuals: Any = "auto",
        max_programs: int = 256,
    ) -> None:
        self._call = call
        self._residuals = residuals
        self._in_node = in_node
        self._out_node = out_node
        self._in_specs = tuple(leaf_specs(in_node))
        self._out_specs = tuple(leaf_specs(out_node))
        self._max = max_programs
        self._lock = threading.Lock()
        self._programs: OrderedDict[Any, Callable[..., Any]] = OrderedDict()
        self._signatures: OrderedDict[Any, Signature] = OrderedDict()

    # -- running the function on flat leaves -------------------------------------------

    def _run(self, params: Any, structure: Any, arrays: Any) -> list[Any]:
        output = self._call(params, rebuild(self._in_node, structure, arrays))
        return flatten_outputs(self._out_node, output)[2]

    def signature(
        self,
        params: Any,
        structure: Any,
        arrays: tuple[Any, ...],
        paths: tuple[str, ...],
        nodes: tuple[ArrayNode, ...],
    ) -> Signature:
        """The signature of an input, tracing the function abstractly the first time."""
        avals = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays)
        key = (structure, tuple((a.shape, a.dtype) for a in avals))
        with self._lock:
            found = self._signatures.get(key)
            if found is not None:
                self._signatures.move_to_end(key)
                return found

        holder: dict[str, Any] = {}

        def traced(params: Any, arrays: Any) -> Any:
            output = self._call(params, rebuild(self._in_node, structure, arrays))
            holder["flat"] = flatten_outputs(self._out_node, output)
            return holder["flat"][2]

        out_avals = jax.eval_shape(traced, params, avals)
        out_structure, out_paths, _, out_nodes = holder["flat"]
        sig = Signature(
            key,
            paths,
            nodes,
            avals,
            out_structure,
            tuple(out_paths),
            tuple(out_nodes),
            tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in out_avals),
            self._in_specs,
            self._out_specs,
        )
        with self._lock:
            self._signatures[key] = sig
            while len(self._signatures) > self._max:
                self._signatures.popitem(last=False)
        return sig

    def _program(self, key: Any, build: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
        with self._lock:
            found = self._programs.get(key)
            if found is not None:
                self._programs.move_to_end(key)
                return found
        program: Callable[..., Any] = jax.jit(build())
        with self._lock:
            program = self._programs.setdefault(key, program)
            while len(self._programs) > self._max:
                self._programs.popitem(last=False)
        return program

    def _restricted(
        self, sig: Signature, params: Any, arrays: Any, ins: tuple[int, ...], outs: tuple[int, ...]
    ) -> Callable[[tuple], tuple]:
        """The function from the leaves ``ins`` to the leaves ``outs``, others fixed."""
        structure = sig.key[0]

        def restricted(chosen: tuple) -> tuple:
            full = list(arrays)
            for i, value in zip(ins, chosen):
                full[i] = value
            leaves = self._run(params, structure, full)
            return tuple(leaves[o] for o in outs)

        return restricted

    # -- the programs -------------------------------------------------------------

    def apply(self, sig: Signature) -> Callable[..., tuple]:
        """``(params, arrays) -> output leaves``."""
        structure = sig.key[0]
        return self._program(
            ("apply", sig.key),
            lambda: lambda params, arrays: tuple(self._run(params, structure, arrays)),
        )

    def keep(self, sig: Signature) -> Callable[..., tuple]:
        """``(params, arrays) -> (output leaves, vjp function)``: the forward pass through
        ``jax.vjp`` with respect to every differentiable input of inexact dtype, under
        ``jax.checkpoint`` when the residual policy recomputes some of them."""
        diff_in, diff_out = sig.diff_in, sig.diff_out
        rest = tuple(i for i in range(len(sig.out_paths)) if i not in diff_out)

        def build() -> Callable[..., tuple]:
            def keep(params: Any, arrays: tuple) -> tuple:
                def forward(chosen: tuple) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
                    full = list(arrays)
                    for i, value in zip(diff_in, chosen):
                        full[i] = value
                    leaves = self._run(params, sig.key[0], full)
                    return tuple(leaves[o] for o in diff_out), tuple(leaves[o] for o in rest)

                primal = tuple(arrays[i] for i in diff_in)

                def host_effects() -> bool:  # traced once, when this program compiles
                    probe = jax.make_jaxpr(lambda p: jax.vjp(forward, p, has_aux=True))
                    return has_host_effects(probe(primal))

                policy = residual_policy(self._residuals, host_effects)
                if policy is not None:
                    forward = jax.checkpoint(forward, policy=policy)
                diff, vjp_fn, other = jax.vjp(forward, primal, has_aux=True)
                leaves: list[Any] = [None] * len(sig.out_paths)
                for o, value in zip(diff_out, diff):
                    leaves[o] = value
                for o, value in zip(rest, other):
                    leaves[o] = value
                return tuple(leaves), vjp_fn

            return keep

        return self._program(("keep", sig.key), build)

    def backward(self, sig: Signature, ins: tuple[int, ...], outs: tuple[int, ...]) -> Callable:
        """``(vjp function, cotangents of outs) -> cotangents of ins``, from kept residuals;
        the other outputs get zero cotangents."""
        diff_in, diff_out = sig.diff_in, sig.diff_out

        def build() -> Callable[..., tuple]:
            def backward(vjp_fn: Any, cotangents: tuple) -> tuple:
                given = dict(zip(outs, cotangents))
                zeros = {o: jnp.zeros(a.shape, a.dtype) for o, a in enumerate(sig.out_avals)}
                full = tuple(given[o] if o in given else zeros[o] for o in diff_out)
                (grads,) = vjp_fn(full)
                by_leaf = dict(zip(diff_in, grads))
                return tuple(by_leaf[i] for i in ins)

            return backward

        return self._program(("backward", sig.key, ins, outs), build)

    def jvp(self, sig: Signature, ins: tuple[int, ...], outs: tuple[int, ...]) -> Callable:
        """``(params, arrays, tangents of ins) -> tangents of outs``."""

        def build() -> Callable[..., tuple]:
            def jvp(params: Any, arrays: tuple, tangents: tuple) -> tuple:
                f = self._restricted(sig, params, arrays, ins, outs)
                return jax.jvp(f, (tuple(arrays[i] for i in ins),), (tuple(tangents),))[1]

            return jvp

        return self._program(("jvp", sig.key, ins, outs), build)

    def jacobian(
        self, sig: Signature, ins: tuple[int, ...], outs: tuple[int, ...], mode: str
    ) -> Callable:
        """``(params, arrays) -> jac[out][in]``, by forward or reverse mode."""

        def build() -> Callable[..., tuple]:
            def jacobian(params: Any, arrays: tuple) -> tuple:
                f = self._restricted(sig, params, arrays, ins, outs)
                transform = jax.jacfwd if mode == "fwd" else jax.jacrev
                return transform(f)(tuple(arrays[i] for i in ins))

            return jacobian

        return self._program(("jacobian", sig.key, ins, outs, mode), build)
