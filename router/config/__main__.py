"""``python -m router.config --markdown``: the configuration reference; ``--update FILE`` puts it in FILE."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from router.config.reference import BEGIN, END, markdown, with_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m router.config",
                                     description="The configuration reference, from the key declarations.")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--markdown", action="store_true", help="print the reference as a Markdown table")
    what.add_argument("--update", metavar="FILE", type=Path,
                      help=f"replace the table between the lines {BEGIN!r} and {END!r} of this file "
                           "(docs/CONFIGURATION.md)")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown())
        return 0
    text = args.update.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        parser.error(f"{args.update}: no generated-table markers")
    args.update.write_text(with_table(text), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
