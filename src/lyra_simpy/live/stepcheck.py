"""Are the real engine's steps what the model charges? (``compare --steps SCENARIO``)

A simulated latency can miss a real one for two reasons: the steps cost another time
than the cost model says (the host ran at another speed than when it was profiled, or
the fit is off for some shapes), or the steps themselves differ (the schedule: what was
batched with what, queueing, admission). The summary metrics cannot tell them apart; the
streams can. This rebuilds the engine steps of the real runs from their token times, as
``calibrate --from-runs --scenario`` does (:mod:`~lyra_simpy.calibration.runs`: the
scenario's engine gives the prompt stops, the token budget and, for llama.cpp, the slots,
passes and KV cells), prices each rebuilt step with the scenario's own cost model — the
:class:`~lyra_simpy.cost.base.BatchShape` the simulator would charge, plus the request
path its arrivals add (``workload.request_path_ms`` × ``request_path_cpu_share`` per
request sent during the step, as the engine charges it) — and reports measured /
charged:

* decode-only steps: median, mean, 10th and 90th percentile, and the median by decoding
  sequences (a host whose batch of 2 costs twice a batch of 1 shows there);
* steps that carry prompt tokens: median, and the median by the prompt tokens in the step
  (:data:`PROMPT_BINS`: a fit that prices one range of prompt sizes wrong shows there, as
  a fit from one load's runs that put the prompts' cost on the attention term alone did,
  ``docs/VALIDATION-llamacpp.md`` item 25);
* left out: rebuilt steps that hid engine steps (a prompt's earlier chunks in steps that
  emitted no token: their split between engine steps is not known).

The verdict reads the decode-only median against :data:`STEP_TOLERANCE`: outside it,
latency errors of about that size come from the step cost, not the schedule; inside
it, an error well beyond it is in the schedule or in what the decode steps do not show
(prompt steps, gaps between steps). The llama.cpp validation matrix stores this check
for every load of each of its tables (``validate_cpu.py --matrix --steps-check``; the
column "real steps / what the table charges" of ``docs/VALIDATION-llamacpp.md``). Its
sets stored before item 23 priced the steps by the fit's terms instead
(``validation/llamacpp_steps.py``: no padding, per-batch residuals or request path).

For a ``profile`` cost it also gives the ``cost.speed`` that prices the scenario at the
runs' speed (:func:`at_this_speed`: the decode-only steps' mean ratio, the slow steps
included): the scenario at that speed charges these runs' decode steps 1 in the mean.
And the ``cost.prompt_speed`` that does the same for the steps with a prompt
(:func:`at_this_prompt_speed`): on a shared host the two phases need not move together.

Limits, stated: one replica (a client's streams do not say which replica served them);
no speculative decoding (a rebuilt step is one token per sequence); the rebuild's own
limits (``docs/calibration.md`` §7: a chunk delayed past the step gap splits its step).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from lyra_simpy.calibration.steps import Steps
from lyra_simpy.cost.base import BatchShape
from lyra_simpy.cost.profiled import ProfileCostConfig
from lyra_simpy.errors import LyraError
from lyra_simpy.scenario import Scenario

STEP_TOLERANCE = 0.05
"""Decode-only steps within this fraction of the charged time (median ratio) agree with
the model. The validation matrices' speed gate (``validation/speed_gate.py``, ``--gate
0.05``): on the 2-core AMD host of ``docs/VALIDATION-llamacpp.md`` a full-batch decode
step wanders by about ±4 % from one minute to the next (items 20-22), so a closer
reading is the host, not the model."""


PROMPT_BINS = (16, 64, 256)
"""Upper bounds of the prompt-token ranges ``prompt_by_tokens`` splits the prompt steps
into (1-16, 17-64, 65-256, 257 and more): a step's prompt tokens, steps of a factor of 4
apart, the last at llama.cpp's KV padding of 256 cells (``get_n_kv``), where a fit in KV
cells changes slope."""


_BIN_LABELS = [
    *(f"{lo + 1}-{hi}" for lo, hi in zip((0, *PROMPT_BINS), PROMPT_BINS, strict=False)),
    f"{PROMPT_BINS[-1] + 1}+",
]
"""The ranges' names, in order: ``1-16``, ``17-64``, ``65-256``, ``257+``."""


def charged_ms(scenario: Scenario, steps: Steps) -> np.ndarray:
    """What *scenario*'s engine charges for each rebuilt step of *steps* (ms): its cost
    model (without jitter) on the step's shape, plus the request path of the requests
    sent during it (``request_path_ms`` × ``request_path_cpu_share`` each). NaN for a
    rebuilt step that hid engine steps (``steps.steps`` > 1)."""
    cost = scenario.replica_specs()[0].cost_model()
    w = scenario.workload
    path_ms = w.request_path_ms * w.request_path_cpu_share
    cells = steps.prefill_attention_cells if steps.llamacpp else None
    out = np.full(len(steps), np.nan)
    for i in range(len(steps)):
        if steps.steps[i] != 1:
            continue
        shape = BatchShape(
            prefill_seqs=int(steps.prefill_seqs[i]),
            prefill_tokens=int(steps.prefill_tokens[i]),
            prefill_attention_tokens=int(steps.prefill_attention_tokens[i]),
            decode_seqs=int(steps.decode_seqs[i]),
            decode_rows=int(steps.decode_seqs[i]),
            decode_context_tokens=int(steps.decode_context_tokens[i]),
            passes=int(steps.passes[i]),
            checkpoints=int(steps.checkpoints[i]),
            prefill_attention_cells=-1 if cells is None else int(cells[i]),
            output_passes=int(steps.output_passes[i]),
            prefill_computed_cells=int(steps.prefill_computed_cells[i]),
            pass_rows=tuple(int(r) for r in steps.pass_rows[i] if r),
        )
        out[i] = 1000.0 * cost.iteration_s(shape) + path_ms * int(steps.arrivals[i])
    return out


def _stats(ratio: np.ndarray) -> dict[str, Any]:
    if not len(ratio):
        return {"steps": 0, "median": None, "mean": None, "p10": None, "p90": None}
    return {
        "steps": len(ratio),
        "median": float(np.median(ratio)),
        "mean": float(ratio.mean()),
        "p10": float(np.percentile(ratio, 10)),
        "p90": float(np.percentile(ratio, 90)),
    }


def _medians_by(key: np.ndarray, mask: np.ndarray, ratio: np.ndarray) -> dict[int, Any]:
    """Each value of *key* among the steps in *mask*, in order: its ``steps`` and the
    ``median`` of their *ratio*."""
    out = {}
    for k in np.unique(key[mask]):
        hit = mask & (key == k)
        out[int(k)] = {"steps": int(hit.sum()), "median": float(np.median(ratio[hit]))}
    return out


def step_check(scenario: Scenario, real_dirs: list[Path]) -> dict[str, Any]:
    """Measured / charged for the rebuilt steps of *real_dirs* (module docstring):
    ``decode`` and ``prompt`` (``steps``, ``median``, ``mean``, ``p10``, ``p90``),
    ``decode_by_batch`` (decoding sequences → ``steps``, ``median``),
    ``prompt_by_tokens`` (:data:`PROMPT_BINS` range → ``steps``, ``median``), ``left_out``,
    ``dropped`` (the rebuild's own), ``tolerance``, ``verdict``, ``speed``
    (:func:`at_this_speed`) and ``prompt_speed`` (:func:`at_this_prompt_speed`)."""
    from lyra_simpy.calibration.runs import StepRebuild, rebuild_for, steps_of_runs

    if len(scenario.replica_specs()) != 1:
        raise LyraError(
            f"--steps: {scenario.name} has {len(scenario.replica_specs())} replicas; the "
            "check takes one (a client's streams do not say which replica served them)"
        )
    if scenario.speculative is not None:
        raise LyraError(
            f"--steps: {scenario.name} has speculative decoding; steps rebuilt from streams "
            "are one token per sequence"
        )
    spec = scenario.replica_specs()[0]
    rebuild = StepRebuild(**rebuild_for(spec.scheduler, spec.kv_cache.block_size))
    steps = steps_of_runs(real_dirs, rebuild)
    charged = charged_ms(scenario, steps)
    priced = ~np.isnan(charged)
    ratio = np.where(priced, steps.latency_ms / np.where(priced, charged, 1.0), np.nan)
    decode = priced & (steps.prefill_seqs == 0)
    prompt = priced & (steps.prefill_seqs > 0)
    by_batch = _medians_by(steps.decode_seqs, decode, ratio)
    bins = _medians_by(np.searchsorted(PROMPT_BINS, steps.prefill_tokens), prompt, ratio)
    by_tokens = {_BIN_LABELS[k]: v for k, v in bins.items()}
    out: dict[str, Any] = {
        "decode": _stats(ratio[decode]),
        "prompt": _stats(ratio[prompt]),
        "decode_by_batch": by_batch,
        "prompt_by_tokens": by_tokens,
        "left_out": int((~priced).sum()),
        "dropped": steps.dropped,
        "tolerance": STEP_TOLERANCE,
    }
    out["verdict"] = verdict(out["decode"]["median"])
    out["speed"] = at_this_speed(spec.cost, out["decode"]["mean"])
    out["prompt_speed"] = at_this_prompt_speed(spec.cost, out["prompt"]["mean"])
    return out


def at_this_speed(cost: Any, decode_mean: float | None) -> float | None:
    """The ``cost.speed`` that prices a ``profile`` cost at the runs' speed: the one it
    has × the decode-only steps' *mean* measured / charged (a request's TPOT and E2E sum
    its steps, so the slow steps a median leaves out count); None for another cost model
    or without decode-only steps."""
    if not isinstance(cost, ProfileCostConfig) or decode_mean is None:
        return None
    return float(cost.speed * decode_mean)


def at_this_prompt_speed(cost: Any, prompt_mean: float | None) -> float | None:
    """The ``cost.prompt_speed`` that prices a ``profile`` cost's steps with a prompt at
    the runs' speed: the one it prices them at (``prompt_speed``, or ``speed`` where that
    is unset) × their *mean* measured / charged; None for another cost model or without
    such steps."""
    if not isinstance(cost, ProfileCostConfig) or prompt_mean is None:
        return None
    now = cost.prompt_speed if cost.prompt_speed is not None else cost.speed
    return float(now * prompt_mean)


def verdict(median: float | None) -> str:
    """One line on what a decode-only median ratio says (module docstring)."""
    if median is None:
        return "no decode-only step rebuilt: nothing to say about the step cost"
    off = median - 1.0
    if abs(off) <= STEP_TOLERANCE:
        return (
            f"decode steps within {STEP_TOLERANCE:.0%} of what the model charges "
            f"({off:+.1%}): a latency error well beyond that is in the schedule "
            "(batching, queueing, admission) or in the prompt steps"
        )
    way = "slower" if off > 0 else "quicker"
    return (
        f"decode steps ran {abs(off):.0%} {way} than the model charges: latency errors of "
        "about that size come from the step cost (the host's speed since it was profiled, "
        "or the fit), not from the schedule"
    )


def format_step_check(check: dict[str, Any]) -> str:
    """The check as text, a few lines."""

    def line(name: str, s: dict[str, Any]) -> str:
        if not s["steps"]:
            return f"  {name:<13} no steps"
        return (
            f"  {name:<13} median {s['median']:.2f}  mean {s['mean']:.2f}  "
            f"p10-p90 {s['p10']:.2f}-{s['p90']:.2f}  ({s['steps']} steps)"
        )

    batches = "  ".join(
        f"{b}: {v['median']:.2f} ({v['steps']})" for b, v in check["decode_by_batch"].items()
    )
    lines = [
        "real steps / what the model charges (steps rebuilt from the streams):",
        line("decode-only", check["decode"]),
        line("with a prompt", check["prompt"]),
    ]
    if batches:
        lines.append(f"  by sequences  {batches}")
    sizes = "  ".join(
        f"{k}: {v['median']:.2f} ({v['steps']})" for k, v in check["prompt_by_tokens"].items()
    )
    if sizes:
        lines.append(f"  by prompt tokens  {sizes}")
    if check["left_out"]:
        lines.append(f"  left out      {check['left_out']} steps that hid engine steps")
    lines.append(check["verdict"])
    if check.get("speed") is not None:
        lines.append(
            f"priced at these runs' speed: cost.speed: {check['speed']:.3g} (the decode "
            "steps' mean; a request sums its steps)"
        )
    if check.get("prompt_speed") is not None:
        lines.append(
            f"and its steps with a prompt: cost.prompt_speed: {check['prompt_speed']:.3g} "
            "(their mean; where it differs from cost.speed the host moved the two apart)"
        )
    return "\n".join(lines)
