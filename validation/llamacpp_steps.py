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

from lyra_simpy.calibration.fit import ALL_TERMS, ProfileFit, predict_ms, rowwise_dot
from lyra_simpy.calibration.fitfile import load_fit
from lyra_simpy.calibration.profiles import read_profile
from lyra_simpy.calibration.runs import StepRebuild, rebuild_for, steps_of_runs
from lyra_simpy.calibration.steps import Steps
from lyra_simpy.policies.llamacpp import LlamaCppConfig
from lyra_simpy.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "validation-llamacpp"
LOADS = ("poisson_0.3", "poisson_0.6", "poisson_0.9", "closed_4", "closed_8")


def priced(steps: Steps, fit: ProfileFit) -> np.ndarray:
    """Each rebuilt step's latency by *fit* (its prompts' attention counted in the KV
    cells the engine model counts, its passes and checkpoints, when the rebuild counted
    them: :func:`rebuild`)."""
    x = steps.design_matrix()
    coef = np.array([getattr(fit.coefficients, t) for t in ALL_TERMS[: x.shape[1]]])
    return rowwise_dot(x, coef)


def rebuild(config: LlamaCppConfig, fit: ProfileFit) -> StepRebuild:
    """How the server's steps are rebuilt, as ``calibrate --from-runs --scenario`` does:
    its context checkpoints' prompt stops, its ``n_batch`` as the prompt budget and, for
    a fit in cells (``attention: n_kv``), a prompt's attention in KV cells, its passes
    from the replayed slots and its checkpoints."""
    implied = rebuild_for(config)
    if fit.attention != "n_kv":
        implied.pop("llamacpp")
    return StepRebuild(**implied)


def _median(values: np.ndarray) -> str:
    return f"{np.median(values):.2f}" if len(values) else "—"


def load_ratios(point: Path, load: str, which: str = "probes") -> dict[str, float] | None:
    """The real runs of *load* at *point*, measured / predicted by the fit of its probes
    or of its runs (*which*): ``decode_p50``, ``decode_mean`` and ``decode_steps`` of the
    decode-only steps, ``prompt_p50`` and ``prompt_steps`` of those that carry prompt
    tokens (None: no stored runs)."""
    runs = sorted((point / "real" / load).glob("run*"))
    if not runs:
        return None
    fit = load_fit(point / f"fit_{which}.yaml")
    config = load_scenario(point / f"{load}.yaml").scheduler
    assert isinstance(config, LlamaCppConfig)
    steps = steps_of_runs(runs, rebuild(config, fit))
    ratio = steps.latency_ms / priced(steps, fit)
    prompt = steps.prefill_seqs > 0
    nan = float("nan")
    return {
        "decode_p50": float(np.median(ratio[~prompt])) if (~prompt).any() else nan,
        "decode_mean": float(ratio[~prompt].mean()) if (~prompt).any() else nan,
        "decode_steps": int((~prompt).sum()),
        "prompt_p50": float(np.median(ratio[prompt])) if prompt.any() else nan,
        "prompt_steps": int(prompt.sum()),
    }


def point_rows(point: Path, which: str = "probes") -> list[str]:
    """One line per load of *point*: decode-only and prompt steps, measured / predicted
    by the fit of its probes (Table 1's) or of its runs (*which*: ``runs``, Table 2's)."""
    fit = load_fit(point / f"fit_{which}.yaml")
    profile = read_profile(point / "profile.csv")
    probe = profile.latency_ms / predict_ms(fit, profile)
    lines = [
        f"{point.name} (the fit of its {which}): probe rows, measured / fit: prefill "
        f"{_median(probe[profile.phase == 'prefill'])}, mixed "
        f"{_median(probe[profile.phase == 'mixed'])}, decode "
        f"{_median(probe[profile.phase == 'decode'])}"
    ]
    for load in LOADS:
        got = load_ratios(point, load, which)
        if got is None:
            continue
        lines.append(
            f"  {load:<12} decode-only {got['decode_p50']:5.2f} (mean {got['decode_mean']:4.2f},"
            f" {got['decode_steps']:5d} steps)   with a prompt {got['prompt_p50']:5.2f}"
            f" ({got['prompt_steps']:4d} steps)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("points", nargs="*", help="e.g. kvu_long (default: every stored point)")
    parser.add_argument("--fit", choices=["probes", "runs"], default="probes",
                        help="price the steps by the fit of the probes (Table 1's, default) "
                        "or of the fitted load's runs (Table 2's)")  # fmt: skip
    args = parser.parse_args(argv)
    stored = sorted(p.name for p in OUT.glob("*") if (p / "fit_probes.yaml").is_file())
    names = args.points or stored
    if not names:
        print(f"nothing stored in {OUT}: run validate_cpu.py --matrix first", file=sys.stderr)
        return 2
    for name in names:
        print("\n".join(point_rows(OUT / name, args.fit)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
