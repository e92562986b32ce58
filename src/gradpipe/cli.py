"""The ``gradpipe`` command line: ``demo``, ``serve``, ``call`` and ``bench``."""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys

__all__ = ["main"]


def _checkout_script(relative: str) -> pathlib.Path:
    """A script of the source checkout (examples/, benchmarks/), which an editable
    install keeps beside the package."""
    root = pathlib.Path(__file__).resolve().parents[2]
    path = root / relative
    if not path.is_file():
        raise SystemExit(
            f"gradpipe: {relative} is not here ({root}); this command runs from a source "
            f"checkout (git clone, then `make demo`)."
        )
    return path


def _run_script(relative: str, argv: list[str]) -> int:
    return subprocess.run([sys.executable, str(_checkout_script(relative)), *argv]).returncode


def main(argv: list[str] | None = None) -> int:
    from gradpipe import __version__

    shows_defaults = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(
        prog="gradpipe", description=__doc__, formatter_class=shows_defaults
    )
    parser.add_argument("--version", action="version", version=f"gradpipe {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("version", help="print gradpipe's version")
    demo = commands.add_parser(
        "demo",
        help="run the running example; plots go to OUTDIR",
        formatter_class=shows_defaults,
    )
    demo.add_argument("outdir", nargs="?", default="out", help="where the plots and tables go")
    commands.add_parser("bench", help="run every benchmark against its peer")
    commands.add_parser("serve", help="serve a component over HTTP (MODULE:ATTR)")
    commands.add_parser("call", help="call an endpoint of a gradpipe server")
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("serve", "call"):
        from gradpipe.serve._cli import main as serve_main  # needs the `serve` extra

        return serve_main(argv[0], argv[1:])
    args = parser.parse_args(argv)
    if args.command == "version":
        print(__version__)
        return 0
    if args.command == "demo":
        return _run_script("examples/demo.py", [args.outdir])
    if args.command == "bench":
        return _run_script("benchmarks/run_all.py", [])
    return 0


if __name__ == "__main__":
    sys.exit(main())
