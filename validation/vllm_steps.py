"""How the vLLM matrix's real decode steps spread around the probe fit.

``python validation/vllm_steps.py [CFG_WORKLOAD ...]`` reads what
``validate_vllm_cpu.py`` left in ``results/validation-vllm`` (no server): the streams of
each point's real runs, rebuilt into engine steps as ``calibrate --from-runs`` does
(:mod:`lyra_simpy.calibration.runs`, the scenario's token budget as the prompt budget),
and the fit of the probes (``FIT``, Table 1's).
For the decode-only steps of each load (no prompt in them) it prints measured /
predicted at the 10th, 50th and 90th percentiles, the mean (what a TPOT averages), the
share of steps at 1.5x or more, and how many of those follow a slow step (slow steps
in stretches: the host, not one request's event).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from lyra_simpy.calibration.fit import rowwise_dot
from lyra_simpy.calibration.fitfile import load_fit
from lyra_simpy.calibration.fitmodel import TERMS
from lyra_simpy.calibration.runs import StepRebuild, steps_of_runs
from lyra_simpy.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "validation-vllm"
FIT = ROOT / "validation" / "fits" / "vllm_cpu_tiny.yaml"
SLOW = 1.5


def decode_ratios(runs: list[Path], fit: Path, budget: int) -> dict[str, float]:
    """The decode-only steps of the real runs *runs* of one load (served with a token
    budget of *budget*: long prompts ran in chunks), measured / predicted by *fit*:
    ``steps``, ``p10``, ``p50``, ``p90``, ``mean``, ``slow`` (the share at
    :data:`SLOW` or more) and ``after_slow`` (of those, the share right after another)."""
    coefficients = load_fit(fit).coefficients
    coef = np.array([getattr(coefficients, t) for t in TERMS])
    parts = []
    for run in runs:  # run by run: a stretch of slow steps does not cross runs
        steps = steps_of_runs([run], StepRebuild(prompt_budget=budget))
        ratio = steps.latency_ms / rowwise_dot(steps.design_matrix(), coef)
        parts.append(ratio[steps.prefill_seqs == 0])
    slow = [r >= SLOW for r in parts]
    after_slow = sum(int(np.sum(s[1:] & s[:-1])) for s in slow)
    ratio = np.concatenate(parts)
    n_slow = int(sum(int(s.sum()) for s in slow))
    p10, p50, p90 = (float(x) for x in np.percentile(ratio, [10, 50, 90]))
    return {"steps": len(ratio), "p10": p10, "p50": p50, "p90": p90,
            "mean": float(ratio.mean()), "slow": n_slow / len(ratio),
            "after_slow": after_slow / max(n_slow, 1)}  # fmt: skip


def load_row(got: dict[str, float]) -> str:
    """:func:`decode_ratios` as one line of the table."""
    return (
        f"{got['steps']:6.0f}  {got['p10']:5.2f}  {got['p50']:5.2f}  {got['p90']:5.2f}  "
        f"{got['mean']:5.2f}  {got['slow']:6.0%}  {got['after_slow']:10.0%}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm_steps.py", description=__doc__.split("\n")[0])
    parser.add_argument("points", nargs="*", help="e.g. default_short (default: every point)")
    args = parser.parse_args(argv)
    every = sorted(p for p in OUT.iterdir() if (p / "real").is_dir())
    points = [OUT / p for p in args.points] or every
    print(f"decode-only steps of the real runs, measured / predicted by {FIT.name}")
    print(f"{'point':30s} {'load':12s} {'steps':>6s}  {'p10':>5s}  {'p50':>5s}  {'p90':>5s}  "
          f"{'mean':>5s}  {'>=1.5x':>6s}  after slow")  # fmt: skip
    for point in points:
        if not (point / "real").is_dir():
            print(f"{point}: no real runs (run validate_vllm_cpu.py first)", file=sys.stderr)
            return 2
        for load in sorted(p for p in (point / "real").iterdir() if p.is_dir()):
            runs = sorted(p for p in load.iterdir() if (p / "tokens.jsonl").is_file())
            budget = load_scenario(point / f"{load.name}.yaml").scheduler.max_num_batched_tokens
            row = load_row(decode_ratios(runs, FIT, budget))
            print(f"{point.name:30s} {load.name:12s} {row}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
