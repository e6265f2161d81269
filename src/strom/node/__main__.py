"""`python -m strom.node [--config FILE] [--set key=value ...]`: the broker without the CLI layer."""

from __future__ import annotations

import argparse
import sys

from strom.node.main import serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strom.node")
    parser.add_argument("--config", default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    return serve(args.config, args.set)


if __name__ == "__main__":
    sys.exit(main())
