"""A missing optional dependency gives an ImportError that names the extra to install."""

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys

    BLOCKED = {blocked!r}

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Block())
    try:
        import {package}
    except ImportError as error:
        print("MESSAGE:", error)
    else:
        print("MESSAGE: imported")
    """
)

CASES = [
    ("gradpipe.jax", ["jax", "jaxlib"], "gradpipe[jax]"),
    ("gradpipe.jax", ["equinox"], "gradpipe[jax]"),
    ("gradpipe.component", ["pydantic"], "gradpipe[component]"),
    ("gradpipe.component", ["jax", "jaxlib"], "gradpipe[component]"),
    ("gradpipe.serve", ["starlette"], "gradpipe[serve]"),
    ("gradpipe.serve", ["uvicorn"], "gradpipe[serve]"),
    ("gradpipe.ooc", ["jax", "jaxlib"], "gradpipe[ooc]"),
]


@pytest.mark.parametrize("package, blocked, extra", CASES)
def test_missing_dependency_names_the_extra(package, blocked, extra):
    script = SCRIPT.format(blocked=set(blocked), package=package)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    message = result.stdout.split("MESSAGE:", 1)[1]
    assert extra in message, message
    assert any(name in message for name in blocked), message
