"""The ``gradpipe`` command line: ``demo``, ``serve``, ``call``, ``check-gradients``
and ``bench``."""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from gradpipe._cli_common import HelpFormatter, import_target

__all__ = ["HelpFormatter", "import_target", "main"]

# What a shell reports for a process ended by SIGPIPE (128 + 13): `gradpipe call | head`.
BROKEN_PIPE_EXIT = 141


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


def _check_gradients_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target", metavar="MODULE:ATTR", help="the Component to check, e.g. mymodel:component"
    )
    parser.add_argument(
        "--inputs",
        default=None,
        metavar="JSON",
        help="where to take the derivatives: a JSON file, - for stdin, or the JSON text "
        "itself, arrays as nested lists (default: drawn at random from the input model)",
    )
    parser.add_argument(
        "--app-dir", default=".", metavar="DIR", help="directory to import MODULE from"
    )
    parser.add_argument(
        "--input-path",
        action="append",
        dest="input_paths",
        metavar="PATH",
        help="an input leaf to check, e.g. layers[0].w; repeat for more "
        "(default: every differentiable float input)",
    )
    parser.add_argument(
        "--output-path",
        action="append",
        dest="output_paths",
        metavar="PATH",
        help="an output leaf to check; repeat for more (default: every differentiable "
        "float output)",
    )
    parser.add_argument(
        "--endpoint",
        action="append",
        dest="endpoints",
        choices=("jvp", "vjp"),
        help="the derivative endpoint to check; repeat for both (default: jvp and vjp)",
    )
    parser.add_argument(
        "--directions", type=int, metavar="N", default=3, help="random directions per input path"
    )
    parser.add_argument(
        "--step",
        type=float,
        metavar="H",
        default=None,
        help="relative step h / max(1, max|x|) (default: eps^(1/3) of the dtypes involved, "
        "6e-6 for float64, 5e-3 for float32)",
    )
    parser.add_argument(
        "--rtol",
        type=float,
        metavar="RTOL",
        default=None,
        help="relative tolerance of each Jacobian block as a whole (default: eps^(1/3) of "
        "the dtypes involved)",
    )
    parser.add_argument(
        "--atol",
        type=float,
        metavar="ATOL",
        default=None,
        help="absolute tolerance (default: ten times the rounding error of the difference "
        "quotient)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        metavar="SEED",
        default=0,
        help="seeds the directions and the drawn inputs",
    )
    parser.add_argument(
        "--size",
        type=int,
        metavar="N",
        default=4,
        help="length of axes declared None in drawn inputs",
    )


def _read_inputs(spec: str) -> Any:
    import json

    if spec == "-":
        text = sys.stdin.read()
    elif spec.lstrip().startswith(("{", "[")):
        text = spec
    else:
        path = pathlib.Path(spec[1:] if spec.startswith("@") else spec)
        if not path.is_file():
            raise SystemExit(
                f"gradpipe check-gradients: --inputs {spec!r} is neither a file nor JSON text."
            )
        text = path.read_text()
    try:
        inputs = json.loads(text)
    except ValueError as error:
        raise SystemExit(f"gradpipe check-gradients: --inputs is not valid JSON: {error}") from None
    if not isinstance(inputs, dict):
        raise SystemExit("gradpipe check-gradients: --inputs must be a JSON object of the inputs.")
    return inputs


def _run_check_gradients(args: argparse.Namespace) -> int:
    try:
        from gradpipe.component import Component, check_gradients
    except ImportError as error:
        raise SystemExit(f"gradpipe check-gradients: {error}") from None

    component = import_target(args.target, args.app_dir, "check-gradients")
    if not isinstance(component, Component):
        raise SystemExit(
            f"gradpipe check-gradients: {args.target} is a {type(component).__name__}, not a "
            f"Component; check a Component(fn, inputs=InputModel, outputs=OutputModel)."
        )
    inputs = _read_inputs(args.inputs) if args.inputs is not None else None
    try:
        result = check_gradients(
            component,
            inputs,
            input_paths=args.input_paths,
            output_paths=args.output_paths,
            endpoints=args.endpoints or ("jvp", "vjp"),
            directions=args.directions,
            step=args.step,
            rtol=args.rtol,
            atol=args.atol,
            seed=args.seed,
            size=args.size,
        )
    except (ValueError, TypeError) as error:
        raise SystemExit(f"gradpipe check-gradients: {error}") from None
    where = "the given inputs" if inputs is not None else f"random inputs (seed {args.seed})"
    print(
        f"{args.target}: {result.directions} random directions per input path at {where}; "
        f"central differences taken in float64, JAX's 64-bit types "
        f"{'on' if result.x64 else 'off'}\n"
    )
    print(result.table())
    return 0 if result.passed else 1


def _parser() -> argparse.ArgumentParser:
    from gradpipe import __version__

    parser = argparse.ArgumentParser(
        prog="gradpipe",
        description="gradpipe: differentiable scientific pipelines in JAX. "
        "Run `gradpipe COMMAND --help` for the options of a command.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gradpipe {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("version", help="print gradpipe's version")
    demo = commands.add_parser(
        "demo", help="run the running example; plots go to OUTDIR", formatter_class=HelpFormatter
    )
    demo.add_argument("outdir", nargs="?", default="out", help="where the plots and tables go")
    commands.add_parser("bench", help="run every benchmark against its peer")
    commands.add_parser("serve", help="serve a component over HTTP (MODULE:ATTR)", add_help=False)
    commands.add_parser("call", help="call an endpoint of a gradpipe server", add_help=False)
    check = commands.add_parser(
        "check-gradients",
        help="compare a component's jvp and vjp with finite differences",
        description="Compare the jvp and vjp of MODULE:ATTR (a Component) with central "
        "differences of its apply, on given or random inputs. Prints a table of errors per "
        "input and output path; exits 1 when any is over tolerance.",
        formatter_class=HelpFormatter,
    )
    _check_gradients_parser(check)
    return parser


def _main(argv: list[str]) -> int:
    if argv and argv[0] in ("serve", "call"):
        try:
            from gradpipe.serve._cli import main as serve_main
        except ImportError as error:
            raise SystemExit(f"gradpipe {argv[0]}: {error}") from None
        return serve_main(argv[0], argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "version":
        from gradpipe import __version__

        print(__version__)
        return 0
    if args.command == "demo":
        return _run_script("examples/demo.py", [args.outdir])
    if args.command == "bench":
        return _run_script("benchmarks/run_all.py", [])
    return _run_check_gradients(args)


def quietly(run: Callable[[], int]) -> int:
    """``run()``, ending quietly when the reader of stdout goes away (``| head``) or
    the user presses Ctrl-C: an exit status and no traceback. A ``SystemExit`` with a
    message (a refusal that says what to do) prints it and exits 2."""
    try:
        code = run()
        sys.stdout.flush()
        return code
    except SystemExit as refusal:
        if not isinstance(refusal.code, str):
            raise
        print(refusal.code, file=sys.stderr)
        return 2
    except BrokenPipeError:
        # Python flushes stdout again on exit, which would fail again: point it at
        # /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE_EXIT
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
    """Run ``gradpipe ARGS...``; **returns** the exit status."""
    return quietly(lambda: _main(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
