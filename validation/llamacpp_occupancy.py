"""How full the server's steps were in the real runs, against the simulator's iterations.

``python validation/llamacpp_occupancy.py [CFG_REGIME ...] [--loads closed_8 ...]`` reads
what ``validate_cpu.py --matrix`` left in ``results/validation-llamacpp`` (no server). For
each load it prints, per real run and for the simulated run of the same requests:

- the run's span (first send to last token) and output throughput;
- the share of that span spent in engine steps (the rebuilt steps' durations, as
  ``calibrate --from-runs --scenario`` rebuilds them; the rest is time the engine idled
  or steps the rebuild left out);
- the time-weighted mean number of sequences a step carried (decodes plus prompt chunks)
  and the share of step time at each count.

A real server that keeps its slots as full as the simulator does but runs each step
slower shows the same occupancy and a lower throughput; one that leaves slots empty
(a request that could run waiting a step longer than the simulator has it wait) shows a
lower occupancy at the same step costs. Issue 12: the closed loops' throughput misses.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from lyra_simpy import read_series
from lyra_simpy.calibration.runs import StepRebuild, rebuild_for, rebuild_steps
from lyra_simpy.calibration.streams import read_run
from lyra_simpy.metrics.io import read_jsonl
from lyra_simpy.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "validation-llamacpp"
LOADS = ("poisson_0.3", "poisson_0.6", "poisson_0.9", "closed_4", "closed_8")


def shares(seqs: np.ndarray, weights: np.ndarray, top: int) -> str:
    """The share of *weights* at each sequence count 1..*top* (the last: *top* or more)."""
    total = weights.sum() or 1.0
    cells = []
    for n in range(1, top + 1):
        hit = seqs >= n if n == top else seqs == n
        cells.append(f"{100 * weights[hit].sum() / total:.0f}")
    return "/".join(cells)


def real_row(folder: Path, rebuild: StepRebuild, top: int) -> tuple[str, ...]:
    requests = read_run(folder)
    steps = rebuild_steps(requests, rebuild, str(folder))
    span = max(r.chunk_s[-1] for r in requests) - min(r.arrival_s for r in requests)
    tokens = sum(sum(r.chunk_tokens) for r in requests)
    seqs = steps.decode_seqs + steps.prefill_seqs
    w = steps.latency_ms
    return (
        folder.name,
        f"{span:.1f}",
        f"{tokens / span:.1f}",
        f"{100 * w.sum() / 1000 / span:.0f}",
        f"{np.average(seqs, weights=w):.2f}",
        shares(seqs, w, top),
    )


def sim_row(folder: Path, top: int) -> tuple[str, ...]:
    """The simulated run's row, its span and throughput counted as :func:`real_row`
    counts a real run's (first send to last token, from its ``requests.jsonl``)."""
    series = read_series(folder)
    start, end = np.asarray(series["start_s"]), np.asarray(series["end_s"])
    seqs = np.asarray(series["batch_seqs"])
    w = (end - start) * 1000.0
    rows = [r for r in read_jsonl(folder / "requests.jsonl") if r["status"] == "ok"]
    span = max(r["finish_s"] for r in rows) - min(r["arrival_s"] for r in rows)
    tokens = sum(r["output_tokens"] for r in rows)
    return (
        "sim",
        f"{span:.1f}",
        f"{tokens / span:.1f}",
        f"{100 * w.sum() / 1000 / span:.0f}",
        f"{np.average(seqs, weights=w):.2f}",
        shares(seqs, w, top),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llamacpp_occupancy.py")
    parser.add_argument("points", nargs="*", help="e.g. np2_b64_short (default: every one)")
    parser.add_argument("--loads", nargs="+", default=list(LOADS), choices=LOADS)
    args = parser.parse_args(argv)
    points = [OUT / p for p in args.points] or sorted(p for p in OUT.iterdir() if p.is_dir())
    for point in points:
        for load in args.loads:
            scen_file = point / f"{load}.yaml"
            if not scen_file.is_file():
                continue
            scen = load_scenario(scen_file)
            rebuild = StepRebuild(**rebuild_for(scen.scheduler, scen.kv_cache.block_size))
            top = scen.scheduler.max_batch
            print(f"\n{point.name} {load}  (columns: run, span s, tok/s, % of span in steps, "
                  f"mean seqs a step, % of step time at 1..{top} seqs)")  # fmt: skip
            sims = [p for p in (point / "sim" / load).iterdir() if (p / "summary.json").is_file()]
            rows = [sim_row(sims[0], top)] if sims else []
            for run in sorted((point / "real" / load).glob("run*")):
                rows.append(real_row(run, rebuild, top))
            for row in rows:
                print("  " + "  ".join(f"{c:>8}" for c in row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
