"""The command line a person meets: its version, its help, its refusals, `gradpipe
call` against a real server and `gradpipe check-gradients` in a real subprocess."""

import argparse
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

import gradpipe

COMPONENTS = textwrap.dedent(
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    import pydantic

    from gradpipe.component import Array, Component, Differentiable


    class In(pydantic.BaseModel):
        x: Differentiable[Array[np.float32, (None,)]]
        w: Differentiable[Array[np.float32, ()]]


    class Out(pydantic.BaseModel):
        y: Differentiable[Array[np.float32, (None,)]]


    @jax.custom_vjp
    def wrong_sin(x):
        return jnp.sin(x)


    wrong_sin.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (-g * jnp.cos(x),))

    good = Component(lambda d: {"y": jnp.sin(d["x"]) * d["w"]}, inputs=In, outputs=Out)
    bad = Component(lambda d: {"y": wrong_sin(d["x"]) * d["w"]}, inputs=In, outputs=Out)
    not_a_component = 3
    """
)


def _cli(*args, cwd=None, env=None, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "gradpipe.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def app_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("app")
    (directory / "cli_components.py").write_text(COMPONENTS)
    return directory


def test_version_flag_and_command_print_the_version():
    flag, command = _cli("--version"), _cli("version")
    assert flag.returncode == 0 and flag.stdout.strip() == f"gradpipe {gradpipe.__version__}"
    assert command.returncode == 0 and command.stdout.strip() == gradpipe.__version__


def test_demo_help_describes_its_argument_and_default():
    out = _cli("demo", "--help")
    assert out.returncode == 0
    assert "where the plots and tables go" in out.stdout and "(default: out)" in out.stdout


def _all_parsers():
    pytest.importorskip("starlette")
    from gradpipe.cli import _parser
    from gradpipe.serve._cli import _parsers

    top = _parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    own = {name: p for name, p in commands.choices.items() if name not in ("serve", "call")}
    return {"gradpipe": top, **own, **_parsers()}


def test_every_argument_has_help_and_shows_its_default_once():
    for name, parser in _all_parsers().items():
        formatter = parser.formatter_class(prog=parser.prog)
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                assert all(choice.help for choice in action._choices_actions), name
                continue
            where = f"{name} {action.option_strings or action.dest}"
            assert action.help, f"{where} has no help text"
            shown = formatter._get_help_string(action).replace("%(default)", "")
            if action.option_strings or action.nargs == "?":
                assert shown.count("(default") == 1, f"{where}: {shown!r}"
        text = parser.format_help()
        assert text.startswith(f"usage: {parser.prog}") and "(default: None)" not in text


BLOCKER = textwrap.dedent(
    """
    import sys

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {blocked!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Block())
    from gradpipe.cli import main
    sys.exit(main({argv!r}))
    """
)


@pytest.mark.parametrize(
    "argv, blocked, extra",
    [
        (["serve", "cli_components:good"], {"starlette"}, "gradpipe[serve]"),
        (["check-gradients", "cli_components:good"], {"pydantic"}, "gradpipe[component]"),
    ],
)
def test_a_missing_extra_is_one_line(argv, blocked, extra, app_dir):
    script = BLOCKER.format(blocked=blocked, argv=argv)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=app_dir, timeout=120
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and extra in lines[0], done.stderr


def test_a_module_that_cannot_be_imported_hints_at_where_it_was_looked_for(tmp_path):
    done = _cli("serve", "nosuch_module:thing", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    message = done.stderr.strip()
    assert len(message.splitlines()) == 1
    assert str(tmp_path) in message and "--app-dir" in message and "PYTHONPATH" in message


def _main(capsys, *args):
    """``gradpipe ARGS`` in this process (faster than a subprocess): ``(status, out, err)``."""
    from gradpipe.cli import main

    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_check_gradients_passes_a_correct_component(app_dir, capsys):
    status, out, err = _main(
        capsys, "check-gradients", "cli_components:good", "--app-dir", str(app_dir)
    )
    assert status == 0, out + err
    rows = [line.split() for line in out.splitlines() if line.startswith(("x ", "w "))]
    assert {(r[0], r[1], r[2], r[-1]) for r in rows} == {
        (i, "y", e, "ok") for i in ("x", "w") for e in ("jvp", "vjp")
    }


def test_check_gradients_fails_a_wrong_custom_vjp_naming_its_input(app_dir):
    inputs = json.dumps({"x": [0.3, 0.7, 1.1], "w": 2.0})
    done = _cli(
        "check-gradients", "cli_components:bad", "--app-dir", str(app_dir), "--inputs", inputs
    )
    assert done.returncode == 1, done.stdout + done.stderr
    failing = [line.split() for line in done.stdout.splitlines() if "FAIL" in line]
    assert [row[:3] for row in failing] == [["x", "y", "vjp"]]
    assert "over tolerance" in done.stdout.splitlines()[-1]


def test_check_gradients_refuses_what_is_not_a_component(app_dir, capsys):
    args = ("check-gradients", "cli_components:not_a_component", "--app-dir", str(app_dir))
    status, _, err = _main(capsys, *args)
    assert status == 2 and "not a Component" in err and len(err.strip().splitlines()) == 1


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(app_dir):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("starlette")
    port = _free_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("GRADPIPE_TOKEN", None)
    command = [sys.executable, "-m", "gradpipe.cli", "serve", "cli_components:good",
               "--app-dir", str(app_dir), "--port", str(port),
               "--log-level", "warning"]  # fmt: skip
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    try:
        while True:
            assert process.poll() is None, "the server exited"
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not come up in 90 s"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def test_call_without_endpoint_lists_the_endpoints_and_the_schema(server, capsys):
    for args in ([server], [server, "--list"]):
        status, out, err = _main(capsys, "call", *args)
        assert status == 0, err
        names = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
        for endpoint in ("apply", "jvp", "vjp", "jacobian", "abstract_eval", "health", "stats"):
            assert endpoint in names
        assert "x  float32 (None,) *" in out


def test_call_suggests_the_endpoint_meant(server, capsys):
    status, _, err = _main(capsys, "call", server, "aply", "{}")
    assert status == 2 and "Did you mean apply?" in err and len(err.strip().splitlines()) == 1


def test_call_prints_numbers_and_base64_only_on_request(server, capsys):
    payload = json.dumps({"inputs": {"x": [0.0, 0.5], "w": 2.0}})
    status, out, err = _main(capsys, "call", server, "apply", payload)
    assert status == 0, err
    y = json.loads(out)["outputs"]["y"]
    assert y["dtype"] == "float32" and y["shape"] == [2]
    assert y["data"]["encoding"] == "json"
    assert y["data"]["buffer"] == pytest.approx([0.0, 2 * 0.47942555], rel=1e-6)
    assert "0.9588511" in out  # float32's shortest digits, not float64's

    status, out, err = _main(capsys, "call", server, "apply", "--raw", payload)
    assert status == 0, err
    assert json.loads(out)["outputs"]["y"]["data"]["encoding"] == "base64"


def test_call_exits_quietly_when_its_reader_goes_away(server, tmp_path):
    payload = tmp_path / "big.json"
    payload.write_text(json.dumps({"inputs": {"x": [0.25] * 30000, "w": 1.0}}))
    process = subprocess.Popen(
        [sys.executable, "-m", "gradpipe.cli", "call", server, "apply", f"@{payload}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    first = process.stdout.readline()  # what `| head -1` reads, then it goes away
    process.stdout.close()
    stderr = process.stderr.read().decode()
    process.wait(timeout=60)
    assert first.strip() == b"{"
    assert process.returncode in (0, 141) and stderr == "", stderr
