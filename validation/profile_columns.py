"""A stored profile with its rows priced by another column than ``latency_ms`` — the
matrices' ablations: the decode rows by the probes' mean step instead of their median gap
(``lyra-simpy profile`` writes both: columns ``median_gap_ms`` and ``mean_step_ms``;
``validate_vllm_cpu.py``'s summary column, ``validate_cpu.py --matrix --resimulate
--decode-step mean``), and every row unscaled by its speed reference (``raw_latency_ms``,
``grid.speed_reference``; ``validate_cpu.py --matrix --resimulate --unscaled``)."""

from __future__ import annotations

import shutil
from pathlib import Path


def by_column(text: str, column: str, phase: str | None = None) -> str | None:
    """The profile CSV *text* with each row's ``latency_ms`` replaced by its *column*
    (only the rows of *phase*, when given; a row with the cell empty keeps its own);
    None without that column."""
    lines = text.splitlines()
    head = lines[0].split(",")
    if column not in head:
        return None
    lat, other = head.index("latency_ms"), head.index(column)
    out = [lines[0]]
    for line in lines[1:]:
        row = line.split(",")
        if (phase is None or row[0] == phase) and row[other]:
            row[lat] = row[other]
        out.append(",".join(row))
    return "\n".join(out) + "\n"


def by_mean_step(text: str) -> str | None:
    """The profile CSV *text* with each decode row's ``latency_ms`` replaced by its
    ``mean_step_ms``; None without that column."""
    return by_column(text, "mean_step_ms", "decode")


def write_by_column(profile: Path, out: Path, column: str, phase: str | None = None) -> bool:
    """*profile* (CSV and its metadata YAML) as :func:`by_column` prices it, written to
    *out* (and the YAML beside it); False, writing nothing, without the column."""
    text = by_column(profile.read_text(), column, phase)
    if text is None:
        return False
    out.write_text(text)
    shutil.copyfile(profile.with_suffix(".yaml"), out.with_suffix(".yaml"))
    return True


def write_by_mean_step(profile: Path, out: Path) -> bool:
    """:func:`write_by_column` with the decode rows' ``mean_step_ms``."""
    return write_by_column(profile, out, "mean_step_ms", "decode")
