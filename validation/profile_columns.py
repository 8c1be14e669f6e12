"""A stored profile with its decode rows priced by the probes' mean step instead of
their median gap (``lyra-simpy profile`` writes both: columns ``median_gap_ms`` and
``mean_step_ms``): the matrices' ablation of that choice (``validate_vllm_cpu.py``'s
summary column, ``validate_cpu.py --matrix --resimulate --decode-step mean``)."""

from __future__ import annotations


def by_mean_step(text: str) -> str | None:
    """The profile CSV *text* with each decode row's ``latency_ms`` replaced by its
    ``mean_step_ms``; None without that column."""
    lines = text.splitlines()
    head = lines[0].split(",")
    if "mean_step_ms" not in head:
        return None
    lat, gap = head.index("latency_ms"), head.index("mean_step_ms")
    out = [lines[0]]
    for line in lines[1:]:
        row = line.split(",")
        if row[0] == "decode" and row[gap]:
            row[lat] = row[gap]
        out.append(",".join(row))
    return "\n".join(out) + "\n"
