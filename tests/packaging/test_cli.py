"""The command line a person meets first: its version and its help."""

import subprocess
import sys

import gradpipe


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "gradpipe.cli", *args], capture_output=True, text=True
    )


def test_version_flag_and_command_print_the_version():
    flag, command = _cli("--version"), _cli("version")
    assert flag.returncode == 0 and flag.stdout.strip() == f"gradpipe {gradpipe.__version__}"
    assert command.returncode == 0 and command.stdout.strip() == gradpipe.__version__


def test_demo_help_describes_its_argument_and_default():
    out = _cli("demo", "--help")
    assert out.returncode == 0
    assert "where the plots and tables go" in out.stdout and "(default: out)" in out.stdout
