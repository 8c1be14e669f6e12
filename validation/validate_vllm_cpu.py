"""``tox -e validate-vllm-cpu``: the simulator against a real vLLM V1 on this CPU (issue 21).

Scaffold, modelled on ``validate_cpu.py``: installs :data:`~lyra_simpy.live.vllm_cpu.PACKAGE`
into a cached environment, builds the tiny random-weight Llama, starts vLLM on 127.0.0.1
with :data:`SERVER_FLAGS` and ``VLLM_CPU_KVCACHE_SPACE`` = :data:`KV_SPACE_GIB`, then
through the ``lyra-simpy`` command line: profiles it, calibrates, and for every scenario
of :data:`SCENARIOS` (the llama.cpp workloads with vLLM's settings as ``--set``
overrides) simulates, replays :data:`REPEATS` times and compares; stops the server and
writes ``docs/VALIDATION-vllm.md`` (the comparison tables as ``lyra-simpy compare``
prints them, the fit, and per replay the engine's own counters from ``/metrics``:
prefix-cache hits and preemptions, beside the simulated ones). Run end to end in quick
mode only so far; the matrix of issue 21 (loads to saturation, chunked prefill, prefix
caching, preemption, >= 3 repeats) is still to add: :data:`MATRIX_TODO`.

Two Pythons: this script and the ``lyra-simpy`` steps run in the interpreter that runs
it (tox's environment, or the project's venv); vLLM runs in its own cached environment
(:func:`~lyra_simpy.live.vllm_cpu.env_python`).

Environment: ``LYRA_QUICK=1`` (each scenario's ``quick:`` block), ``LYRA_VALIDATE_REPEATS``
(default 3), ``LYRA_CACHE`` (where the environment and model live).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from lyra_simpy.cli import main as cli_main
from lyra_simpy.live import vllm_cpu
from lyra_simpy.live.compare import compare, format_comparison
from lyra_simpy.machine import cpu_model, load_average
from lyra_simpy.presets.vllm import cpu_kv_blocks

ROOT = Path(__file__).resolve().parents[1]
KV_SPACE_GIB = 2
MAX_NUM_SEQS = 8
SERVER_FLAGS = [
    "--max-model-len", "2048",
    "--dtype", "bfloat16",
    "--max-num-seqs", str(MAX_NUM_SEQS),
]  # fmt: skip
BLOCK_SIZE = 128  # vLLM's CPU default (presets/vllm.py)
SCENARIOS = ["poisson_light", "poisson_medium", "closed_loop_4", "closed_loop_8"]
PROFILE = "validation/profiles/vllm_cpu_tiny.csv"
FIT = "validation/fits/vllm_cpu_tiny.yaml"
GRID = "validation/profile_grid.yaml"
MATRIX_TODO = [
    "loads from light to saturation, open loop (Poisson rates as fractions of the fitted "
    "capacity, as validate_cpu.py sets them) and closed loop (1 to 8 clients and beyond "
    "--max-num-seqs)",
    "chunked prefill with a small --max-num-batched-tokens (e.g. 256) and long prompts "
    "among short ones",
    "prefix caching on and off (--no-enable-prefix-caching) with shared system prompts: "
    "hit rate and TTFT against vllm:prefix_cache_hits_total / "
    "vllm:prefix_cache_queries_total from /metrics",
    "preemption: a KV pool small enough to force it (--num-gpu-blocks-override), "
    "preemption counts against vllm:num_preemptions_total from /metrics",
    ">= 3 real runs per point on a quiet machine, the median compared, the real spread "
    "beside every error",
]
"""What issue 21's validation matrix still needs (written into the document)."""


def overrides() -> list[str]:
    """``--set`` pairs that turn a llama.cpp validation scenario into this server's:
    the fitted cost, vLLM's CPU token budget and block size, the KV pool of
    ``VLLM_CPU_KVCACHE_SPACE`` GiB of the tiny model."""
    blocks = cpu_kv_blocks(KV_SPACE_GIB, BLOCK_SIZE, vllm_cpu.KV_BYTES_PER_TOKEN)
    pairs = {
        "cost.path": f"fits/{Path(FIT).name}",
        "scheduler.max_num_seqs": MAX_NUM_SEQS,
        "scheduler.max_num_batched_tokens": 2048,
        "kv_cache.block_size": BLOCK_SIZE,
        "kv_cache.num_blocks": blocks,
    }
    out: list[str] = []
    for key, value in pairs.items():
        out += ["--set", f"{key}={value}"]
    return out


def step(*args: str) -> None:
    """Run one ``lyra-simpy`` command in-process; stop the validation if it fails."""
    print("\n$ lyra-simpy " + " ".join(shlex.quote(a) for a in args), flush=True)
    code = cli_main(list(args))
    if code != 0:
        raise SystemExit(f"validate-vllm-cpu: `lyra-simpy {args[0]}` exited {code}")


def _fit_lines() -> list[str]:
    """The fitted coefficients and R² of :data:`FIT`, as the document shows them."""
    try:
        fit = yaml.safe_load((ROOT / FIT).read_text())
    except (OSError, yaml.YAMLError):
        return ["(no fit)"]
    coef = fit.get("coefficients", {})
    lines = [f"- `{k}`: {v:.4g} ms" for k, v in coef.items()]
    report = fit.get("report") or fit.get("fit") or {}
    r2 = report.get("r2") if isinstance(report, dict) else None
    if r2 is not None:
        lines.append(f"- R² (all rows): {r2:.3f}")
    return lines


def step_check(profile_csv: Path, real_itl_ms: float | None) -> str | None:
    """A line comparing the profile's decode step (batch 1, the median over its contexts)
    with the real replays' median ITL at the lightest load: the same engine step measured
    twice; when they differ by more than 10 % the machine was not equally busy."""
    try:
        rows = profile_csv.read_text().splitlines()[1:]
    except OSError:
        return None
    steps = sorted(
        float(r.split(",")[4]) for r in rows if r.startswith("decode,1,")
    )  # fmt: skip
    if not steps or real_itl_ms is None:
        return None
    prof = steps[len(steps) // 2]
    gap = prof / real_itl_ms - 1.0
    line = (
        f"Step-time check: the profile's decode step at batch 1 was {prof:.1f} ms, the "
        f"real replays' median inter-token gap at the lightest load {real_itl_ms:.1f} ms "
        f"({100 * gap:+.0f} %)."
    )
    if abs(gap) > 0.10:
        line += (
            " The same engine step measured twice differs by more than 10 %: the profile "
            "and the replays ran under different contention, which shifts every simulated "
            "time by about that much; the errors below mostly measure that."
        )
    return line


def _counter_table(counters: dict[str, dict[str, Any]]) -> list[str]:
    """Per scenario: the engine's /metrics deltas over its replays beside the simulation."""
    lines = [
        "| scenario | prefix-cache hit rate real (sim) | hit tokens / queried | "
        "preemptions real (sim) |",
        "|---|---|---|---|",
    ]
    for name, c in counters.items():
        rate = c.get("prefix_cache_hit_rate")
        real = "n/a" if rate is None else f"{100 * rate:.1f} %"
        hits = f"{c.get('prefix_cache_hits', 0):.0f} / {c.get('prefix_cache_queries', 0):.0f}"
        pre = f"{c.get('preemptions', 0):.0f} ({c['sim_preemptions']})"
        sim_rate = f"{100 * c['sim_hit_rate']:.1f} %"
        lines.append(f"| {name} | {real} ({sim_rate}) | {hits} | {pre} |")
    return lines


def doc(
    tables: dict[str, str],
    launch: str,
    quick: bool,
    repeats: int,
    facts: dict[str, Any],
    counters: dict[str, dict[str, Any]],
) -> str:
    """``docs/VALIDATION-vllm.md``: what ran, on what, each comparison table, the
    engine's counters, and what the validation matrix still needs."""
    smoke = quick or repeats < 3
    how = "each scenario's `quick:` block, " if quick else ""
    lines = [
        "# Validation against vLLM V1 on this CPU",
        "",
        "Written by `tox -e validate-vllm-cpu` (validation/validate_vllm_cpu.py); never by hand.",
        "",
    ]
    if smoke:
        lines += [
            "> **A smoke run, not the validation.** These figures come from one "
            f"{'quick ' if quick else ''}run ({how}{repeats} real run"
            f"{'s' if repeats != 1 else ''} per point) on a busy shared "
            f"{facts['cores']}-core machine (load average {facts['load_start']} at the "
            f"start, {facts['load_end']} at the end, other engineers' jobs running beside "
            "it). They show that the loop runs end to end against a real vLLM (install, "
            "model, server, profile, calibrate, run, replay, compare); they do not measure "
            "the simulator's error: runs this short and this few give no real spread to "
            "judge it by, and the profile and the replays were slowed by whatever else "
            "ran. The "
            "llama.cpp workloads are reused as they are (their descriptions still say "
            "llama-server); only the engine knobs are vLLM's (`--set` below).",
            "",
        ]
    lines += [
        f"- server: `{launch}`",
        f"- package: `{vllm_cpu.PACKAGE}`; model: random-weight Llama {vllm_cpu.TINY}",
        f"- CPU: {facts['cpu']} ({facts['cores']} cores); wall time {facts['wall_min']} min",
        f"- real runs per point: {repeats}" + (" (quick mode)" if quick else ""),
        f"- simulator knobs: `{' '.join(overrides())}`",
        "",
        "## Fit (`lyra-simpy calibrate`)",
        "",
        *_fit_lines(),
        "",
        *([facts["step_check"], ""] if facts.get("step_check") else []),
        "## Engine counters (`/metrics`, summed over each scenario's replays)",
        "",
        *_counter_table(counters),
        "",
        "The workloads draw independent random prompts, so neither side should show "
        "prefix-cache hits or preemptions here; the matrix below is what tests them.",
        "",
    ]
    for name, table in tables.items():
        note = " (spread: n/a with one real run)" if repeats < 2 else ""
        lines += [f"## {name}{note}", "", "```", table, "```", ""]
    lines += ["## What the validation matrix still needs (issue 21)", ""]
    lines += [f"- {item}" for item in MATRIX_TODO]
    lines += [
        "",
        "Targets, as for llama.cpp: throughput within 5 %; p50 TTFT, TPOT and E2E within "
        "10 % or the real spread; hit rate within 2 points; preemptions within 10 %.",
        "",
    ]
    return "\n".join(lines)


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(f"validate-vllm-cpu: stopped by signal {signum}")  # stops the server too


def main() -> int:
    os.chdir(ROOT)
    signal.signal(signal.SIGTERM, _stop)
    started = time.time()
    facts: dict[str, Any] = {"cores": os.cpu_count(), "load_start": load_average()}
    quick = os.environ.get("LYRA_QUICK") == "1"
    repeats = int(os.environ.get("LYRA_VALIDATE_REPEATS", "3"))
    out = ROOT / "results" / "validation-vllm"
    python = vllm_cpu.env_python()
    model = vllm_cpu.tiny_model(python)
    base = ["--quick"] if quick else []
    vocab = str(vllm_cpu.TINY["vocab_size"])
    tables: dict[str, str] = {}
    counters: dict[str, dict[str, Any]] = {}
    log = out / "vllm-server.log"
    with vllm_cpu.Server(python, model, SERVER_FLAGS, log, KV_SPACE_GIB) as srv:
        step("profile", "--endpoint", srv.url, "--out", PROFILE, "--grid", GRID,
             "--flags", srv.launch, "--vocab-size", vocab)  # fmt: skip
        step("calibrate", PROFILE, "--out", FIT)
        for name in SCENARIOS:
            path = f"validation/{name}.yaml"
            q = [*base, *overrides()]
            step("run", path, "--out", str(out / "sim"), "--no-figures", *q)
            reals = []
            before = vllm_cpu.engine_counters(srv.url)
            for k in range(repeats):
                real = out / "real" / name / f"run{k + 1}"
                limits = ["--timeout-s", "120", "--time-limit-s", "900", "--vocab-size", vocab]
                step("replay", path, "--endpoint", srv.url, "--out", str(real), *limits, *q)
                reals.append(real)
            delta: dict[str, Any] = vllm_cpu.counter_delta(
                before, vllm_cpu.engine_counters(srv.url)
            )
            sims = [p for p in (out / "sim" / name).iterdir() if (p / "summary.json").is_file()]
            sim = json.loads((sims[0] / "summary.json").read_text())
            delta["sim_hit_rate"] = sim.get("prefix_cache_hit_rate", 0.0)
            delta["sim_preemptions"] = sim.get("total_preemptions", 0)
            counters[name] = delta
            table = compare(sims[0], reals, None, out / f"{name}_compare.json")
            tables[name] = format_comparison(table)
            if "step_check" not in facts:  # the first scenario is the lightest load
                itl = next((r["real"] for r in table if r["metric"] == "median_itl_ms"), None)
                facts["step_check"] = step_check(ROOT / PROFILE, itl)
        launch = srv.launch
    facts.update(load_end=load_average(), wall_min=round((time.time() - started) / 60.0, 1))
    facts["cpu"] = cpu_model() or "unknown"
    target = ROOT / "docs" / "VALIDATION-vllm.md"
    target.write_text(doc(tables, launch, quick, repeats, facts, counters))
    saved = {"facts": facts, "tables": tables, "counters": counters}
    (out / "validation.json").write_text(json.dumps(saved, indent=1) + "\n")
    print(f"\nwrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
