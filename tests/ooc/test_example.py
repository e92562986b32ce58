"""The out-of-core part of the demo runs and checks itself."""

import importlib.util
import pathlib

import numpy as np
import pytest
from suite_device import tolerance

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples" / "out_of_core.py"


@pytest.mark.slow
def test_out_of_core_example_fits_and_checks_its_gradient(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("out_of_core_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(tmp_path)
    out = capsys.readouterr().out
    assert "x the MemoryBudget" in out
    rel = float(out.split("relative error vs in-memory JAX ")[1].split()[0])
    rtol, _ = tolerance(1e-4, 0, np.float32(rel), 0.0)  # the example computes in float32
    assert rel < rtol
    assert "compiled 1x" in out and "max |w - w_true| = 0.00" in out
    # the loss curve is drawn where matplotlib is installed (gradpipe[plot])
    plotted = importlib.util.find_spec("matplotlib") is not None
    assert (tmp_path / "out_of_core_loss.png").exists() == plotted
    assert ("loss curve: " in out) == plotted
