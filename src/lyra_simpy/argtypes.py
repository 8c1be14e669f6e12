"""Argument types of the command line: each parses one option's text or raises
``argparse.ArgumentTypeError`` with the value and what is allowed (argparse prints it
as one line and exits 2)."""

from __future__ import annotations

import argparse


def count(text: str) -> int:
    """An integer >= 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"got {text!r}, must be an integer >= 1")
    return int(text)


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        return float("nan")
    return value if value != float("inf") else float("nan")


def milliseconds(text: str) -> float:
    """A finite number >= 0 (ms)."""
    value = _finite(text)
    if not value >= 0.0:
        raise argparse.ArgumentTypeError(f"got {text!r}, must be a number >= 0 (ms)")
    return value


def seconds(text: str) -> float:
    """A finite number > 0 (s)."""
    value = _finite(text)
    if not value > 0.0:
        raise argparse.ArgumentTypeError(f"got {text!r}, must be a number > 0 (s)")
    return value
