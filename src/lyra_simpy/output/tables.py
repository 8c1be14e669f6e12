"""Printed tables: one formatter for every table the command line prints (a run's
report, the what-if scorecard), below everything that prints one so imports go one way."""

from __future__ import annotations

import math
from typing import Any


def format_value(value: Any) -> str:
    """One cell: a statistic over nothing (None, NaN) as "—" (DESIGN §4); floats with
    three significant digits below 10, one decimal from 10 up."""
    if value is None:
        return "—"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"
    return str(value)


def format_table(headers: list[str], rows: list[list[Any]]) -> str:
    """Right-aligned columns under a dashed rule."""
    cells = [headers] + [[format_value(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
