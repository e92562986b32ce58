"""What `check_gradients` found: one row per input path, output path and endpoint,
and the table they print as."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["GradientCheck", "GradientCheckRow"]


@dataclass(frozen=True)
class GradientCheckRow:
    """One comparison of a derivative endpoint with central differences.

    - `input_path`, `output_path`: the leaves compared (the block of the Jacobian
      from that input to that output).
    - `endpoint`: ``"jvp"`` or ``"vjp"``.
    - `abs_error`: the largest absolute difference over the directions tried.
    - `rel_error`: the largest ratio of that difference to the size of the
      derivative it concerns (see `check_gradients`).
    - `rtol`, `atol`: the tolerance the row was held to (``atol`` is the largest
      over the directions; it follows each direction's rounding error by default).
    - `passed`: ``True`` or ``False``; ``None`` when the endpoint could not run
      (a ``jax.custom_vjp`` function has no `jvp`), which `note` explains.
    - `note`: why a row failed or did not run, or ``""``.
    """

    input_path: str
    output_path: str
    endpoint: str
    abs_error: float
    rel_error: float
    rtol: float
    atol: float
    passed: bool | None
    note: str = ""

    @property
    def status(self) -> str:
        """``"ok"``, ``"FAIL"`` or ``"n/a"``, as the table prints it."""
        return {True: "ok", False: "FAIL", None: "n/a"}[self.passed]


@dataclass(frozen=True)
class GradientCheck:
    """The result of `check_gradients`: print it for the table of errors.

    - `rows`: the `GradientCheckRow`s, by input path, then output path, then endpoint.
    - `inputs`: the inputs the derivatives were taken at (the drawn ones when none
      were given), as a nested dict the component accepts.
    - `seed`, `directions`: what drew the directions (and the inputs).
    - `x64`: whether JAX's 64-bit types were on during the check.
    """

    rows: tuple[GradientCheckRow, ...]
    inputs: dict[str, Any]
    seed: int
    directions: int
    x64: bool

    @property
    def passed(self) -> bool:
        """Whether every row that ran is within tolerance (and at least one ran)."""
        ran = [row for row in self.rows if row.passed is not None]
        return bool(ran) and all(row.passed for row in ran)

    @property
    def failures(self) -> tuple[GradientCheckRow, ...]:
        """The rows over tolerance."""
        return tuple(row for row in self.rows if row.passed is False)

    def table(self) -> str:
        """The rows as a plain-text table, with a summary line under it."""
        header = ("input", "output", "endpoint", "max abs error", "max rel error", "rtol", "")
        lines = [
            (
                row.input_path,
                row.output_path,
                row.endpoint,
                _number(row.abs_error) if row.passed is not None else "-",
                _number(row.rel_error) if row.passed is not None else "-",
                _number(row.rtol),
                row.status + (f"  {row.note}" if row.note else ""),
            )
            for row in self.rows
        ]
        widths = [max(len(line[c]) for line in [header, *lines]) for c in range(6)]
        right = (False, False, False, True, True, True)

        def render(cells: tuple[str, ...]) -> str:
            padded = [
                cell.rjust(width) if is_right else cell.ljust(width)
                for cell, width, is_right in zip(cells, widths, right)
            ]
            return "  ".join([*padded, cells[6]]).rstrip()

        ruler = "  ".join("-" * width for width in widths)
        return "\n".join([render(header), ruler, *map(render, lines), "", self.summary()])

    def summary(self) -> str:
        """One line: how many comparisons ran and how many are over tolerance."""
        ran = [row for row in self.rows if row.passed is not None]
        skipped = len(self.rows) - len(ran)
        tail = f" ({skipped} could not run)" if skipped else ""
        if not ran:
            return f"no comparison could run{tail}"
        bad = len(self.failures)
        if bad:
            return f"{bad} of {len(ran)} comparisons over tolerance{tail}"
        return f"all {len(ran)} comparisons within tolerance{tail}"

    def __str__(self) -> str:
        return self.table()


def _number(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    return f"{value:.2e}"
