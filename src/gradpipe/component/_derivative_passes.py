"""The derivative passes of a `Component` over its compiled programs: the forward
pass that keeps residuals, the backward pass from them, the forward-mode push of
tangents, and the Jacobian by forward or reverse mode."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from ._derivatives import DERIVATIVE_ERRORS, DerivativeMemory, derivative_error
from ._endpoints import Programs, Selection, Signature
from ._residuals import Residuals
from ._vectors import fill, inexact

__all__ = ["DerivativePasses"]


class DerivativePasses:
    """What a component's derivative endpoints run once their inputs are checked.

    Each pass refuses a function JAX cannot differentiate with a `TypeError` naming
    the endpoint (see `derivative_error`); what is learned by trying (no residuals for
    a signature, the Jacobian mode that works) goes to the component's
    `DerivativeMemory`, so that each refusal is paid for once.

    **Arguments:**

    - `programs`: the component's compiled programs.
    - `params`: the arrays of the component's function, passed to every program.
    - `learned`: the component's memory of what JAX could not differentiate.
    """

    def __init__(self, programs: Programs, params: Any, learned: DerivativeMemory) -> None:
        self._programs = programs
        self._params = params
        self._learned = learned

    def keep(self, sig: Signature, arrays: tuple[Any, ...], endpoint: str) -> tuple[Any, Any]:
        """The forward pass under ``jax.vjp``: ``(output leaves, vjp function)``; a
        `TypeError` naming ``endpoint`` when JAX cannot differentiate the function."""
        known = self._learned.no_residuals.get(sig.key)
        if known is not None:
            raise derivative_error(endpoint, {"rev": known})
        try:
            return self._programs.keep(sig)(self._params, arrays)
        except DERIVATIVE_ERRORS as error:
            raise derivative_error(endpoint, {"rev": error}) from error

    def pull(
        self,
        residuals: Residuals,
        ins: Selection,
        outs: Selection,
        vectors: dict[int, Any],
        endpoint: str = "vjp",
    ) -> dict[str, Any]:
        """The backward pass from ``residuals``: the cotangents ``vectors`` (by output
        leaf) pulled back to the inputs ``ins``, keyed by path (without waiting)."""
        sig = residuals._signature
        f_ins, f_outs = inexact(ins, sig.diff_in), inexact(outs, sig.diff_out)
        grads: dict[int, Any] = {}
        if f_ins and f_outs:
            program = self._programs.backward(sig, f_ins, f_outs)
            try:
                result = program(residuals._vjp_fn, tuple(vectors[o] for o in f_outs))
            except DERIVATIVE_ERRORS as error:  # e.g. lax.while_loop: no transpose
                raise derivative_error(endpoint, {"rev": error}) from error
            grads = dict(zip(f_ins, result))
        return fill(ins, grads, sig.in_avals)

    def push(
        self,
        sig: Signature,
        arrays: tuple[Any, ...],
        ins: Selection,
        outs: Selection,
        given: dict[int, Any],
    ) -> dict[str, Any]:
        """The forward-mode pass: the tangents ``given`` (by input leaf) pushed forward
        to the outputs ``outs``, keyed by path (without waiting)."""
        f_ins, f_outs = inexact(ins, sig.diff_in), inexact(outs, sig.diff_out)
        pushed: dict[int, Any] = {}
        if f_ins and f_outs:
            program = self._programs.jvp(sig, f_ins, f_outs)
            try:
                result = program(self._params, arrays, tuple(given[i] for i in f_ins))
            except DERIVATIVE_ERRORS as error:
                raise derivative_error("jvp", {"fwd": error}) from error
            pushed = dict(zip(f_outs, result))
        return fill(outs, pushed, sig.out_avals)

    def jacobian(
        self, sig: Signature, arrays: tuple[Any, ...], ins: Selection, outs: Selection, mode: str
    ) -> dict[str, dict[str, Any]]:
        """The Jacobian blocks ``{output path: {input path: array}}`` (without
        waiting); a block of a leaf that is not inexact is NumPy zeros of dtype
        ``float0``."""
        f_ins, f_outs = inexact(ins, sig.diff_in), inexact(outs, sig.diff_out)
        blocks: dict[tuple[int, int], Any] = {}
        if f_ins and f_outs:
            result = self._jacobian(sig, f_ins, f_outs, mode, arrays)
            for o, row in zip(f_outs, result):
                for i, block in zip(f_ins, row):
                    blocks[(o, i)] = block
        jac: dict[str, dict[str, Any]] = {}
        for out_path, o in outs.items:
            jac[out_path] = {}
            for in_path, i in ins.items:
                if (o, i) in blocks:
                    jac[out_path][in_path] = blocks[(o, i)]
                else:
                    shape = sig.out_avals[o].shape + sig.in_avals[i].shape
                    jac[out_path][in_path] = np.zeros(shape, jax.dtypes.float0)
        return jac

    def _jacobian(
        self, sig: Signature, ins: tuple[int, ...], outs: tuple[int, ...], mode: str, arrays: Any
    ) -> Any:
        """The Jacobian blocks by forward or reverse mode. Under ``"auto"``, the cheaper
        mode by size is tried first and the other when JAX cannot differentiate the
        function in it (a ``jax.custom_vjp`` function has no forward mode); the mode
        that worked is remembered for this signature and selection."""
        order = self._learned.jacobian_order(sig, ins, outs) if mode == "auto" else (mode,)
        errors: dict[str, Exception] = {}
        for tried in order:
            try:
                result = self._programs.jacobian(sig, ins, outs, tried)(self._params, arrays)
            except DERIVATIVE_ERRORS as error:
                errors[tried] = error
                continue
            if mode == "auto":
                self._learned.remember(self._learned.jacobian_modes, (sig.key, ins, outs), tried)
            return result
        endpoint = f"jacobian (mode={mode!r})"
        refusal = derivative_error(endpoint, errors)
        raise refusal from errors[order[-1]]
