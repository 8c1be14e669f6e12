"""How much of the simulator's miss is the host's speed? Each load's real decode steps
against the probe fit, beside the speed gate's readings around its runs.

``python validation/llamacpp_host_speed.py [MATRIX_JSON]`` reads the matrix that
``validate_cpu.py --matrix`` stored (``results/validation-llamacpp/matrix.json``, else
the published ``docs/validation/llamacpp-matrix.json``; no server). For every point and
load it takes the speed gate's lone decode step before and after each of its real runs
(``machine``), averaged, over the step the runs were gated to (``gate.run_ref_ms``, the
host's quickest when the profile was taken), and the real runs' decode-only steps over the
probe fit (``steps_vs_fit.decode_mean``: `validation/llamacpp_steps.py`'s measure). It
prints both per load and their correlation over all loads: when the host's own speed
explains the real steps' excess, the two move together and the model is not what is
off. A last column gives the readings right after the runs alone (median, over the same
step), which the gate does not hold unless ``--gate-after``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llamacpp_points import OUT, PUBLISHED

STORED = OUT / "matrix.json"


def pairs(matrix: dict[str, Any]) -> list[tuple[str, str, float, float]]:
    """(point, load, the gate's mean reading over the run reference, real decode steps
    over the probe fit) for every load of every point with both."""
    out = []
    for key, res in matrix["results"].items():
        ref = (res.get("gate") or {}).get("run_ref_ms")
        if not ref:
            continue
        for load, got in res["loads"].items():
            steps = got.get("steps_vs_fit") or {}
            readings = [
                r
                for m in got.get("machine", [])
                for r in (m.get("step_before"), m.get("step_after"))
                if r is not None
            ]
            if readings and steps.get("decode_mean"):
                out.append((key, load, float(np.mean(readings)) / ref, steps["decode_mean"]))
    return out


def afters(matrix: dict[str, Any]) -> dict[tuple[str, str], float]:
    """(point, load) → the gate's median reading right *after* the load's runs over the run
    reference: a host (or server) that slowed under a run reads slow here though the gate
    let the run start in band (``docs/VALIDATION-llamacpp.md`` item 14)."""
    out = {}
    for key, res in matrix["results"].items():
        ref = (res.get("gate") or {}).get("run_ref_ms")
        for load, got in res["loads"].items():
            after = [m["step_after"] for m in got.get("machine", []) if m.get("step_after")]
            if ref and after:
                out[key, load] = float(np.median(after)) / ref
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else (STORED if STORED.is_file() else PUBLISHED)
    matrix = json.loads(path.read_text())
    rows, after = pairs(matrix), afters(matrix)
    if not rows:
        print(f"{path}: no load with both the gate's readings and the steps' ratio")
        return 1
    print(path)
    print(f"{'point':16s} {'load':12s} {'host / gated':>12s} {'steps / fit':>11s} "
          f"{'after / gated':>13s}")  # fmt: skip
    for key, load, host, steps in rows:
        print(f"{key:16s} {load:12s} {host:12.3f} {steps:11.3f} "
              f"{after.get((key, load), float('nan')):13.2f}")  # fmt: skip
    host = np.array([r[2] for r in rows])
    steps = np.array([r[3] for r in rows])
    corr = float(np.corrcoef(host, steps)[0, 1]) if len(rows) > 2 else float("nan")
    print(
        f"{len(rows)} loads: host {host.min():.3f}-{host.max():.3f} x the gated speed, "
        f"real decode steps {steps.min():.3f}-{steps.max():.3f} x the fit; "
        f"correlation {corr:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
