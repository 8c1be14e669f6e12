"""Where the llama.cpp matrix's Table 1 misses: the real runs' engine steps against the
probe fit, decode-only steps apart from steps that carry a prompt.

``python validation/llamacpp_steps.py [CFG_REGIME ...]`` reads what ``validate_cpu.py
--matrix`` left in ``results/validation-llamacpp`` (no server): for each point, the fit
of its probes (``fit_probes.yaml``, Table 1's) and the streams of its real runs. It
rebuilds the runs' steps as ``calibrate --from-runs`` does (the scenario's own
checkpoint stops; :mod:`lyra_simpy.calibration.runs`), prices each with the probe fit
(:func:`priced`),
and prints per load the median of measured / predicted for the decode-only steps and
for the steps that carry prompt tokens, with how many of each. The probe rows' own
ratios (prefill, mixed) are printed beside them: the fit's residual where it was fitted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from lyra_simpy.calibration.fit import TERMS, ProfileFit, predict_ms, rowwise_dot
from lyra_simpy.calibration.fitfile import load_fit
from lyra_simpy.calibration.profiles import read_profile
from lyra_simpy.calibration.runs import StepRebuild, Steps, steps_of_runs
from lyra_simpy.policies.llamacpp import LlamaCppConfig, step_attention_cells
from lyra_simpy.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "validation-llamacpp"
LOADS = ("poisson_0.3", "poisson_0.6", "poisson_0.9", "closed_4", "closed_8")


def priced(steps: Steps, fit: ProfileFit, config: LlamaCppConfig) -> np.ndarray:
    """Each rebuilt step's latency by *fit*: with a fit in ``n_kv`` units, a step's
    prompt tokens × the cells they attend over, counted from its requests as the engine
    model counts them (the decoders' contexts and the prompt's own tokens; several
    prompts in one step are taken as one chunk: a diagnostic, not the simulator)."""
    coef = np.array([getattr(fit.coefficients, t) for t in TERMS])
    x = steps.design_matrix()
    if fit.attention == "n_kv":
        for k in np.flatnonzero(steps.prefill_tokens > 0):
            new = int(steps.prefill_tokens[k])
            cached = int(steps.prefill_attention_tokens[k]) // new - new
            dec = int(steps.decode_seqs[k])
            held = int(steps.decode_context_tokens[k]) - dec + cached
            x[k, 4] = step_attention_cells(config, dec, [(cached, new)], held)
    return rowwise_dot(x, coef)


def rebuild(config: LlamaCppConfig) -> StepRebuild:
    """How the server's steps are rebuilt: its context checkpoints' prompt stops and its
    ``n_batch`` as the prompt budget (as the matrix's Table 2 calibrates)."""
    return StepRebuild(prompt_stops=config.checkpoint_stops, prompt_budget=config.batch_tokens)


def _median(values: np.ndarray) -> str:
    return f"{np.median(values):.2f}" if len(values) else "—"


def point_rows(point: Path) -> list[str]:
    """One line per load of *point*: decode-only and prompt steps, measured / predicted."""
    fit = load_fit(point / "fit_probes.yaml")
    config = load_scenario(point / "poisson_0.3.yaml").scheduler
    assert isinstance(config, LlamaCppConfig)
    profile = read_profile(point / "profile.csv")
    probe = profile.latency_ms / predict_ms(fit, profile)
    lines = [
        f"{point.name}: probe rows, measured / fit: prefill "
        f"{_median(probe[profile.phase == 'prefill'])}, mixed "
        f"{_median(probe[profile.phase == 'mixed'])}, decode "
        f"{_median(probe[profile.phase == 'decode'])}"
    ]
    for load in LOADS:
        runs = sorted((point / "real" / load).glob("run*"))
        if not runs:
            continue
        steps = steps_of_runs(runs, rebuild(config))
        ratio = steps.latency_ms / priced(steps, fit, config)
        prompt = steps.prefill_seqs > 0
        lines.append(
            f"  {load:<12} decode-only {_median(ratio[~prompt]):>5} ({(~prompt).sum():5d} steps)"
            f"   with a prompt {_median(ratio[prompt]):>5} ({prompt.sum():4d} steps)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("points", nargs="*", help="e.g. kvu_long (default: every stored point)")
    args = parser.parse_args(argv)
    stored = sorted(p.name for p in OUT.glob("*") if (p / "fit_probes.yaml").is_file())
    names = args.points or stored
    if not names:
        print(f"nothing stored in {OUT}: run validate_cpu.py --matrix first", file=sys.stderr)
        return 2
    for name in names:
        print("\n".join(point_rows(OUT / name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
