"""The ``gradpipe`` command line: ``demo``, ``serve``, ``call`` and ``bench``."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gradpipe", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("version", help="print gradpipe's version")
    args = parser.parse_args(argv)
    if args.command == "version":
        from gradpipe import __version__

        print(__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
