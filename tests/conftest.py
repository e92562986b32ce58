"""Suite-wide hooks (loaded by pytest-xdist's controller too, unlike tests/ooc's)."""

import pathlib
import sys


def pytest_terminal_summary(terminalreporter):
    """After a run that included the out-of-core tests, say how much of the namespace
    the gradient table covers (tests/ooc/test_grad_coverage.py checks it is all)."""
    ooc_tests = pathlib.Path(__file__).parent / "ooc"
    ran = [pathlib.Path(a.split("::")[0]).resolve() for a in terminalreporter.config.args]
    if not any(r == ooc_tests or ooc_tests in r.parents or r in ooc_tests.parents for r in ran):
        return
    try:
        sys.path.insert(0, str(ooc_tests))
        from test_grad_coverage import NO_GRADIENT, gradient_table_size
    except ImportError:  # JAX (the ooc extra) is not installed
        return
    finally:
        sys.path.remove(str(ooc_tests))
    terminalreporter.write_line(
        f"gradient table: {gradient_table_size()} differentiable functions of gradpipe.ooc "
        f"covered, {len(NO_GRADIENT)} without a gradient (each with its reason)"
    )
