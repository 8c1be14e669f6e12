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

``--by-batch`` prints instead, per load, the decode-only steps' median latency by
sequences and forward passes (``b4/p1``: four sequences in one pass), each beside the
profile's decode rows of that batch and passes: what the runs' steps took, with no fit
in between (a fit linear in the batch misses a host whose batch of 2 costs twice a batch
of 1 and whose batch of 4 does not cost four times).

``--arrivals`` prints, per load, measured / predicted (by ``--fit``) of the decode-only
steps during which no request was sent and of those during which one was (a request's
arrival: the client sending it, the server's HTTP threads taking it in, on the cores the
engine's threads compute on), then of the steps that carry prompt tokens, apart by
whether they copy a context checkpoint (with checkpoints on, a prompt's last step does,
its earlier step — where the slot is launched — does not).

``--chunks`` (for a point whose ``-b`` cuts prompts into chunks, ``-np 2 -b 64``) prints,
per load, the median time of the runs' steps that carry one full chunk beside one
decoding sequence, by the chunk's place in its prompt (``c0``: its first), each with the
time the fit charges it, beside the two-sequence decode-only steps and the profile's
mixed rows of the same chunk: the same shape of step at each load, with no fit in
between (item 24).

``--mixed`` prints instead the profile's mixed rows (a prompt beside decoding sequences)
by decoders, prompt and the prompt's step (``b3 p64 s1``: the second step of a 64-token
prompt beside three decoders), each with its rows' median ms, each row's ms by the
decoders' context in brackets, the fit's median ms and measured / fit: the rows
``lyra-simpy speed --prompt N --beside B`` reads the host against, each the median of
the grid's repeats, one row per decoder context (item 77).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import yaml

from lyra_simpy.calibration.fit import predict_ms, rowwise_dot
from lyra_simpy.calibration.fitfile import load_fit
from lyra_simpy.calibration.fitmodel import ALL_TERMS, ProfileFit
from lyra_simpy.calibration.profiles import read_profile
from lyra_simpy.calibration.runs import StepRebuild, rebuild_for, steps_of_runs
from lyra_simpy.calibration.steps import Steps
from lyra_simpy.policies.llamacpp_config import LlamaCppConfig
from lyra_simpy.scenario import Scenario, load_scenario

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


def run_steps(point: Path, load: str, fit: ProfileFit) -> Steps | None:
    """The rebuilt steps of *load*'s real runs at *point*, as :func:`rebuild` with *fit*
    rebuilds them (None: no stored runs)."""
    runs = sorted((point / "real" / load).glob("run*"))
    if not runs:
        return None
    config = load_scenario(point / f"{load}.yaml").scheduler
    assert isinstance(config, LlamaCppConfig)
    return steps_of_runs(runs, rebuild(config, fit))


def load_ratios(point: Path, load: str, which: str = "probes") -> dict[str, float] | None:
    """The real runs of *load* at *point*, measured / predicted by the fit of its probes
    or of its runs (*which*): ``decode_p50``, ``decode_mean`` and ``decode_steps`` of the
    decode-only steps, ``prompt_p50`` and ``prompt_steps`` of those that carry prompt
    tokens (None: no stored runs)."""
    fit = load_fit(point / f"fit_{which}.yaml")
    steps = run_steps(point, load, fit)
    if steps is None:
        return None
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


MIN_STEPS = 10
"""A (sequences, passes) cell of ``--by-batch`` needs this many steps to be printed."""


def _by_batch(
    latency_ms: np.ndarray, seqs: np.ndarray, passes: np.ndarray, min_n: int
) -> dict[tuple[int, int], tuple[float, int]]:
    """(sequences, passes) → (median latency ms, count), cells of *min_n* or more."""
    out: dict[tuple[int, int], tuple[float, int]] = {}
    for b, p in sorted({(int(b), int(p)) for b, p in zip(seqs, passes, strict=True)}):
        hit = (seqs == b) & (passes == p)
        if hit.sum() >= min_n:
            out[b, p] = (float(np.median(latency_ms[hit])), int(hit.sum()))
    return out


def decode_by_batch(steps: Steps) -> dict[tuple[int, int], tuple[float, int]]:
    """(sequences, passes) → (median latency ms, steps) of *steps*' decode-only steps,
    for every cell with :data:`MIN_STEPS` steps or more."""
    decode = steps.prefill_seqs == 0
    return _by_batch(
        steps.latency_ms[decode], steps.decode_seqs[decode], steps.passes[decode], MIN_STEPS
    )


def batch_rows(point: Path) -> list[str]:
    """One line per load of *point*: :func:`decode_by_batch` of its real runs, after a
    line of the profile's decode rows (median latency by batch and passes)."""
    fit = load_fit(point / "fit_probes.yaml")
    profile = read_profile(point / "profile.csv")
    rows = profile.phase == "decode"
    passes = np.ones_like(profile.batch_size) if profile.passes is None else profile.passes
    probes = _by_batch(profile.latency_ms[rows], profile.batch_size[rows], passes[rows], 1)
    lines = [
        f"{point.name}: decode-only steps, median ms by sequences/passes",
        "  profile      " + "; ".join(f"b{b}/p{p} {ms:.1f}" for (b, p), (ms, _) in probes.items()),
    ]
    for load in LOADS:
        steps = run_steps(point, load, fit)
        if steps is None:
            continue
        got = decode_by_batch(steps)
        cells = "; ".join(f"b{b}/p{p} {ms:.1f} ({n})" for (b, p), (ms, n) in got.items())
        lines.append(f"  {load:<12} {cells}")
    return lines


def point_rows(point: Path, which: str = "probes") -> list[str]:
    """One line per load of *point*: decode-only and prompt steps, measured / predicted
    by the fit of its probes (Table 1's) or of its runs (*which*: ``runs``, Table 2's)."""
    fit = load_fit(point / f"fit_{which}.yaml")
    profile = read_profile(point / "profile.csv")
    probe = profile.latency_ms / predict_ms(fit, profile)
    prefill = profile.phase == "prefill"
    lone = prefill & (profile.batch_size == 1)
    lines = [
        f"{point.name} (the fit of its {which}): probe rows, measured / fit: prefill "
        f"{_median(probe[prefill])} (lone prompts {_median(probe[lone])}, prompts sent "
        f"together {_median(probe[prefill & ~lone])}), mixed "
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


def arrival_split(steps: Steps, ratio: np.ndarray) -> dict[str, tuple[float, int]]:
    """*ratio* (measured / predicted per step of *steps*) by kind of step: ``decode``
    (no request sent during it), ``decode+arrival`` (one or more sent), ``prompt`` (it
    carries prompt tokens and copies no checkpoint), ``prompt+checkpoint``; each its
    median and count (NaN, 0 when there are none)."""
    prompt = steps.prefill_seqs > 0
    kinds = {
        "decode": ~prompt & (steps.arrivals == 0),
        "decode+arrival": ~prompt & (steps.arrivals > 0),
        "prompt": prompt & (steps.checkpoints == 0),
        "prompt+checkpoint": prompt & (steps.checkpoints > 0),
    }
    return {
        k: (float(np.median(ratio[m])) if m.any() else float("nan"), int(m.sum()))
        for k, m in kinds.items()
    }


def arrival_rows(point: Path, which: str = "probes") -> list[str]:
    """One line per load of *point*: :func:`arrival_split` of its real runs' steps priced
    by the fit of its probes or of its runs (*which*)."""
    fit = load_fit(point / f"fit_{which}.yaml")
    lines = [f"{point.name} (the fit of its {which}): measured / fit, median (steps)"]
    for load in LOADS:
        steps = run_steps(point, load, fit)
        if steps is None:
            continue
        got = arrival_split(steps, steps.latency_ms / priced(steps, fit))
        cells = "   ".join(f"{k} {v:.2f} ({n})" if n else f"{k} —" for k, (v, n) in got.items())
        lines.append(f"  {load:<12} {cells}")
    return lines


def chunk_rows(point: Path) -> list[str]:
    """One line per load of *point*: its real runs' steps of one full chunk beside one
    decoding sequence, median ms (charged by the probe fit; count) by the chunk's place in
    its prompt, and the two-sequence decode-only steps; after a line of the profile's
    mixed rows of that chunk by the same place (``--chunks``)."""
    fit = load_fit(point / "fit_probes.yaml")
    with (point / "profile.csv").open() as f:  # (its prompt_step column: lyra-simpy profile)
        mixed = [r for r in csv.DictReader(f) if r["phase"] == "mixed" and r["batch_size"] == "1"]
    if not mixed or not mixed[0].get("prompt_step"):
        return [f"{point.name}: no mixed rows by prompt step in its profile"]
    chunk = Counter(int(r["input_tokens"]) for r in mixed).most_common(1)[0][0]
    places: dict[int, list[int]] = {}
    for r in mixed:
        if int(r["input_tokens"]) == chunk:
            places.setdefault(int(r["prompt_step"]), []).append(round(float(r["latency_ms"])))
    lines = [
        f"{point.name}: steps of a {chunk}-token chunk beside one decoding sequence, median ms "
        "by the chunk's place in its prompt (the fit's charge; steps)",
        "  profile      " + "; ".join(f"c{k} {v}" for k, v in sorted(places.items())),
    ]
    for load in LOADS:
        steps = run_steps(point, load, fit)
        if steps is None:
            continue
        charged = priced(steps, fit)
        hit = (steps.prefill_seqs == 1) & (steps.decode_seqs == 1) & (steps.prefill_tokens == chunk)
        # a chunk of t tokens after o cached ones: t*o + t(t+1)/2 attention tokens
        at = (steps.prefill_attention_tokens - chunk * (chunk + 1) / 2) / chunk / chunk
        place = np.rint(at).astype(int)
        cells = []
        for k in sorted(set(place[hit].tolist())):
            m = hit & (place == k)
            if m.sum() >= 3:
                cells.append(f"c{k} {np.median(steps.latency_ms[m]):.0f} "
                             f"({np.median(charged[m]):.0f}; {int(m.sum())})")  # fmt: skip
        two = (steps.prefill_seqs == 0) & (steps.decode_seqs == 2)
        lines.append(f"  {load:<12} decode b2 {np.median(steps.latency_ms[two]):.1f} "
                     f"({np.median(charged[two]):.1f}); " + "; ".join(cells))  # fmt: skip
    return lines


def priced_mixed_rows(point: Path, which: str = "probes"
                      ) -> dict[tuple[int, int, int], list[tuple[int, float, float]]]:  # fmt: skip
    """*point*'s profile's mixed rows by (decoders, the prompt's tokens, its step), each
    row as (the decoders' context, its ``latency_ms``, what the fit of its *which*
    charges it)."""
    fit = load_fit(point / f"fit_{which}.yaml")
    fitted = predict_ms(fit, read_profile(point / "profile.csv"))
    with (point / "profile.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    groups: dict[tuple[int, int, int], list[tuple[int, float, float]]] = {}
    for row, charged in zip(rows, fitted, strict=True):
        if row["phase"] != "mixed":
            continue
        whole = row.get("prompt_tokens") or row["input_tokens"]
        key = (int(row["batch_size"]), int(whole), int(row.get("prompt_step") or 0))
        got = (int(row["context_len"]), float(row["latency_ms"]), float(charged))
        groups.setdefault(key, []).append(got)
    return groups


def mixed_rows(point: Path, which: str = "probes") -> list[str]:
    """*point*'s profile's mixed rows by (decoders, the prompt's tokens, its step)
    (:func:`priced_mixed_rows`), each with their median ``latency_ms``, each row's by the
    decoders' context, the median of what the fit of its *which* charges them and the
    median of measured / fit, one line each."""
    groups = priced_mixed_rows(point, which)
    lines = [f"{point.name}: mixed rows by decoders, prompt and its step (the fit of its "
             f"{which}): median ms measured (each row's, by the decoders' context), fitted, "
             "measured / fit"]  # fmt: skip
    for (b, n, step), got in sorted(groups.items()):
        ms, fitted_ms = np.array([(m, f) for _, m, f in got]).T
        each = ", ".join(f"{c}: {m:.1f}" for c, m, _ in sorted(got))
        lines.append(f"  b{b} p{n} s{step}  {np.median(ms):.1f} ({each})  "
                     f"{np.median(fitted_ms):.1f}  {np.median(ms / fitted_ms):.3f}")  # fmt: skip
    return lines


def _both_ways(point: Path, load: str) -> dict[str, Scenario]:
    """*load*'s Table 1 scenario at *point* with ``cost.decode_passes`` ``each`` (its
    default) and ``together``."""
    from lyra_simpy.scenario import scenario_from_dict

    raw = yaml.safe_load((point / f"{load}.yaml").read_text())
    out = {}
    for how in ("each", "together"):
        raw["cost"]["decode_passes"] = how
        out[how] = scenario_from_dict(raw, base_dir=point)
    return out


def _probe_cells(point: Path) -> list[str]:
    """The profile's decode rows by sequences and passes, each with its median ms and
    measured / charged by Table 1's cost with ``decode_passes: each`` and ``together``
    (each pass's rows as the probe laid them out:
    :func:`~lyra_simpy.calibration.fit.profile_pass_rows`)."""
    from lyra_simpy.calibration.fit import profile_pass_rows
    from lyra_simpy.cost.base import BatchShape

    costs = [s.replica_specs()[0].cost_model() for s in _both_ways(point, LOADS[0]).values()]
    prof = read_profile(point / "profile.csv")
    passes = np.ones_like(prof.batch_size) if prof.passes is None else prof.passes
    cells = []
    for b, p in sorted({(int(b), int(n)) for b, n, phase in
                        zip(prof.batch_size, passes, prof.phase, strict=True)
                        if phase == "decode"}):  # fmt: skip
        rows = (prof.phase == "decode") & (prof.batch_size == b) & (passes == p)
        split = (profile_pass_rows(b, p) or ()) if p > 1 else ()
        got = []
        for cost in costs:
            charge = [
                1000.0
                * cost.iteration_s(BatchShape(0, 0, 0, b, b, b * int(c), 0, p, 0, -1, p, 0, split))
                for c in prof.context_len[rows]
            ]
            got.append(float(np.median(prof.latency_ms[rows] / np.array(charge))))
        cells.append(f"b{b}/p{p} {np.median(prof.latency_ms[rows]):.1f} ({int(rows.sum())}) "
                     f"{got[0]:.2f} | {got[1]:.2f}")  # fmt: skip
    return cells


def pass_rows_of(point: Path) -> list[str]:
    """One line per load of *point*: its real runs' decode-only steps by sequences and
    passes (``b3/p2``: three sequences in two passes), each with its median ms, its steps
    and measured / charged by Table 1's scenario (``compare --steps``' charge, request
    path included) with ``cost.decode_passes: each`` (default) and ``together``; after a
    line of the profile's own decode rows so (:func:`_probe_cells`)."""
    from lyra_simpy.live.stepcheck import charged_ms

    fit = load_fit(point / "fit_probes.yaml")
    gap = fit.decode_pass_gap_ms
    lines = [
        f"{point.name}: decode-only steps by sequences/passes: median ms (steps) measured / "
        "charged by Table 1, decode_passes each | together (the fit's gap between passes: "
        + ("none" if gap is None else f"{gap:.2f} ms")
        + ")"
    ]
    lines.append("  profile      " + "; ".join(_probe_cells(point)))
    for load in LOADS:
        steps = run_steps(point, load, fit)
        if steps is None:
            continue
        charged = {h: charged_ms(s, steps) for h, s in _both_ways(point, load).items()}
        decode = (steps.prefill_seqs == 0) & (steps.steps == 1)
        cells = []
        for (b, p), _ in _by_batch(steps.latency_ms[decode], steps.decode_seqs[decode],
                                   steps.passes[decode], MIN_STEPS).items():  # fmt: skip
            m = decode & (steps.decode_seqs == b) & (steps.passes == p)
            each, both = (np.median(steps.latency_ms[m] / charged[h][m]) for h in charged)
            cells.append(f"b{b}/p{p} {np.median(steps.latency_ms[m]):.1f} ({int(m.sum())}) "
                         f"{each:.2f} | {both:.2f}")  # fmt: skip
        lines.append(f"  {load:<12} " + "; ".join(cells))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "points",
        nargs="*",
        help="e.g. kvu_long, or a point's folder "
        "elsewhere (--mixed: its profile and fit; default: every stored point)",
    )
    parser.add_argument("--fit", choices=["probes", "runs"], default="probes",
                        help="price the steps by the fit of the probes (Table 1's, default) "
                        "or of the fitted load's runs (Table 2's)")  # fmt: skip
    parser.add_argument("--by-batch", action="store_true",
                        help="the decode-only steps' median by sequences and passes, beside "
                        "the profile's decode rows (no fit)")  # fmt: skip
    parser.add_argument("--arrivals", action="store_true",
                        help="decode-only steps with and without a request sent during "
                        "them, prompt steps with and without a checkpoint, by the fit")  # fmt: skip
    parser.add_argument("--chunks", action="store_true",
                        help="steps of one full prompt chunk beside one decoding sequence, "
                        "by the chunk's place, at each load and in the profile")  # fmt: skip
    parser.add_argument("--passes", action="store_true",
                        help="the decode-only steps by sequences and passes, measured / "
                        "charged by Table 1 with each pass priced at its own rows and "
                        "together (cost.decode_passes)")  # fmt: skip
    parser.add_argument("--mixed", action="store_true",
                        help="the profile's mixed rows by decoders, prompt and step, "
                        "measured / fit (the beside reading's reference)")  # fmt: skip
    args = parser.parse_args(argv)
    stored = sorted(p.name for p in OUT.glob("*") if (p / "fit_probes.yaml").is_file())
    names = args.points or stored
    if not names:
        print(f"nothing stored in {OUT}: run validate_cpu.py --matrix first", file=sys.stderr)
        return 2
    for name in names:
        if args.mixed:
            rows = mixed_rows(Path(name) if Path(name).is_dir() else OUT / name, args.fit)
        elif args.chunks:
            rows = chunk_rows(OUT / name)
        elif args.passes:
            rows = pass_rows_of(OUT / name)
        elif args.by_batch:
            rows = batch_rows(OUT / name)
        elif args.arrivals:
            rows = arrival_rows(OUT / name, args.fit)
        else:
            rows = point_rows(OUT / name, args.fit)
        print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
