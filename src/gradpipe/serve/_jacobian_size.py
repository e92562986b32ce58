"""The bytes a ``/jacobian`` answer would hold, known from shapes before computing.

A Jacobian block has the shape ``output.shape + input.shape``, so a request for the
Jacobian of a million outputs with respect to a million inputs asks for 4 TB of
float32 without sending more than a few megabytes. Computing first and failing on
allocation would take the server down (or answer 500); the server instead reads the
shapes from the inputs and from the component's `abstract_eval`, adds up the blocks,
and refuses a request above its limit with 413, naming the size and the limit.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np

from gradpipe.component import ComponentInputError
from gradpipe.component._paths import canonical_path

from ._paths import flatten, keyed_prefixes
from ._schema import leaf_specs

__all__ = ["jacobian_nbytes"]


def _is_abstract(node: Any) -> bool:
    return isinstance(node, dict) and set(node) == {"shape", "dtype"}


def _canonical(paths: list[str]) -> set[str]:
    out = set()
    for path in paths:
        with contextlib.suppress(ComponentInputError):  # the component names it itself
            out.add(canonical_path(path))
    return out


def _leaf_shapes(
    tree: Any, specs: list[dict[str, Any]], abstract: bool
) -> dict[str, tuple[tuple[int, ...], int]]:
    """``{canonical path: (shape, itemsize)}`` of the array leaves of ``tree``."""
    keyed = keyed_prefixes(spec["path"] for spec in specs)
    out = {}
    for path, leaf in flatten(tree, keyed, _is_abstract if abstract else None):
        if abstract:
            shape, dtype = leaf["shape"], leaf["dtype"]
        elif isinstance(leaf, np.ndarray | np.generic | int | float | complex):
            shape, dtype = np.shape(leaf), np.asarray(leaf).dtype
        else:
            continue
        out[canonical_path(path)] = (tuple(shape), np.dtype(dtype).itemsize)
    return out


def jacobian_nbytes(
    component: Any, inputs: dict[str, Any], jac_inputs: list[str], jac_outputs: list[str]
) -> int:
    """The bytes of the blocks ``component.jacobian(inputs, jac_inputs, jac_outputs)``
    returns, each ``output.shape + input.shape`` in the wider of the two dtypes.

    Paths that name no leaf count nothing (the component refuses them by name). Runs
    `abstract_eval` (a trace, no computation) to learn the output shapes.
    """
    ins = _leaf_shapes(inputs, leaf_specs(component.input_spec()), abstract=False)
    outputs = component.abstract_eval(inputs)
    outs = _leaf_shapes(outputs, leaf_specs(component.output_spec()), abstract=True)
    total = 0
    for o in _canonical(jac_outputs) & outs.keys():
        out_shape, out_size = outs[o]
        for i in _canonical(jac_inputs) & ins.keys():
            in_shape, in_size = ins[i]
            total += math.prod(out_shape) * math.prod(in_shape) * max(out_size, in_size)
    return total
