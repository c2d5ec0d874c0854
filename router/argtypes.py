"""argparse value types shared by the `meshrouter` subcommands."""

from __future__ import annotations

import argparse


def positive_seconds(text: str) -> float:
    """A number of seconds > 0 (argparse `type=`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value
