"""A stored profile with its decode rows priced by the probes' mean step instead of
their median gap (``lyra-simpy profile`` writes both: columns ``median_gap_ms`` and
``mean_step_ms``): the matrices' ablation of that choice (``validate_vllm_cpu.py``'s
summary column, ``validate_cpu.py --matrix --resimulate --decode-step mean``)."""

from __future__ import annotations

import shutil
from pathlib import Path


def by_mean_step(text: str) -> str | None:
    """The profile CSV *text* with each decode row's ``latency_ms`` replaced by its
    ``mean_step_ms``; None without that column."""
    lines = text.splitlines()
    head = lines[0].split(",")
    if "mean_step_ms" not in head:
        return None
    lat, mean = head.index("latency_ms"), head.index("mean_step_ms")
    out = [lines[0]]
    for line in lines[1:]:
        row = line.split(",")
        if row[0] == "decode" and row[mean]:
            row[lat] = row[mean]
        out.append(",".join(row))
    return "\n".join(out) + "\n"


def write_by_mean_step(profile: Path, out: Path) -> bool:
    """*profile* (CSV and its metadata YAML) as :func:`by_mean_step` prices it, written
    to *out* (and the YAML beside it); False, writing nothing, without the column."""
    text = by_mean_step(profile.read_text())
    if text is None:
        return False
    out.write_text(text)
    shutil.copyfile(profile.with_suffix(".yaml"), out.with_suffix(".yaml"))
    return True
