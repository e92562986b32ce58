"""gradpipe.core works where JAX cannot be imported, and never imports it."""

import pathlib
import subprocess
import sys
import textwrap

import gradpipe

SCRIPT = textwrap.dedent(
    """
    import sys

    class BlockJax:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("jax", "jaxlib", "equinox"):
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, BlockJax())
    try:
        import jax  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("jax was importable")

    import numpy as np
    import gradpipe as gp

    x = gp.Input("x")
    g = gp.Graph(inputs=[x], outputs=gp.Fanout([gp.Lambda(np.sum), gp.Lambda(np.max)])(x))
    pipe = gp.Cache(gp.Lambda(lambda v: v * 2)) | gp.Branch(lambda v: v.sum() > 0, g, g)
    snap = gp.Snapshot()
    out = (pipe | snap.at("out"))(np.arange(4.0))
    assert out == (12.0, 6.0), out
    assert "jax" not in sys.modules
    print("ok", out)
    """
)


def test_import_and_run_without_jax():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


def test_core_sources_never_import_jax():
    core = pathlib.Path(gradpipe.__file__).parent / "core"
    for path in core.glob("*.py"):
        text = path.read_text()
        assert "import jax" not in text and "from jax" not in text, path.name
