"""``tox -e validate-cpu``: the simulator against a real llama.cpp server on this CPU.

Builds (or reuses, from ``$LYRA_CACHE`` or ``~/.cache/lyra-simpy``) llama.cpp's
``llama-server``, assembles the Gemma 3 270M Q4_K_M model, starts the server on
127.0.0.1 with :data:`SERVER_FLAGS`, then through the ``lyra-simpy`` command line:
profiles it, calibrates the ``profile`` cost model, and for every scenario in
:data:`SCENARIOS` simulates it, replays it :data:`REPEATS` times on the server and
compares; stops the server (also on SIGTERM or Ctrl-C) and writes ``docs/VALIDATION.md``
(:mod:`validation_doc`), keeping its numbers in ``results/validation/validation.json``
(``--doc-only`` rewrites the document from them).

``--matrix`` runs :mod:`llamacpp_matrix` instead: the ``llamacpp`` engine model (its
preset from the launch flags, llama.cpp's defaults otherwise) over server
configurations, length regimes and loads.

Environment: ``LYRA_QUICK=1`` uses each scenario's ``quick:`` block (a trial run);
``LYRA_VALIDATE_REPEATS`` changes the number of real runs (default 3).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import lyra_cli
from lyra_cli import sim_folder
from validation_doc import diagnostics, write_doc

from lyra_simpy.live import llamacpp
from lyra_simpy.live.client import check_endpoint
from lyra_simpy.machine import cpu_model, load_average

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "validation"
SERVER_FLAGS = [
    "-np", "8",  # slots: at most 8 sequences running (scheduler.max_num_seqs)
    "-c", "4096",  # KV cells for all slots (kv_cache: 256 blocks of 16)
    "-kvu",  # one unified KV buffer: a step is one ubatch whatever slots run (see the doc)
    "-b", "512",  # logical batch: tokens per step (max_num_batched_tokens)
    "-ub", "512",  # physical batch = logical: one ubatch per step
    "-t", "1", "-tb", "1",  # one thread; the client has the other core (see docs/VALIDATION.md)
    "--ctx-checkpoints", "0",  # no SWA checkpoints (they give a prompt's end steps of its own)
    "--cache-ram", "0",  # no host prompt cache (copies each slot's KV after a request)
]  # fmt: skip
EXTRA_BODY = '{"cache_prompt": false}'
SCENARIOS = [
    "poisson_light",
    "poisson_medium",
    "poisson_near_saturation",
    "closed_loop_4",
    "closed_loop_8",
]
LOAD = {"poisson_light": 0.3, "poisson_medium": 0.6, "poisson_near_saturation": 0.9}
"""Poisson rate as a fraction of the capacity the fitted model predicts (the simulated
request throughput of closed_loop_8: all 8 slots always busy)."""
PROFILE = "validation/profiles/llamacpp_gemma3_270m_cpu.csv"
FIT = "validation/fits/llamacpp_gemma3_270m_cpu.yaml"
GRID = "validation/profile_grid.yaml"
FIG_DIR = "docs/validation"


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(f"validate-cpu: stopped by signal {signum}")  # stops the server too


def main() -> int:
    os.chdir(ROOT)
    if sys.argv[1:2] == ["--matrix"]:  # the llamacpp engine model's matrix (issue 12)
        from llamacpp_matrix import main as matrix

        return matrix(sys.argv[2:])
    parser = argparse.ArgumentParser(
        prog="validate_cpu.py",
        description="the simulator against a real llama-server on this CPU (docs/VALIDATION.md); "
        "`--matrix [ARGS]` runs the llamacpp engine model's matrix instead (`--matrix --help`)",
    )
    parser.add_argument("--doc-only", action="store_true",
                        help="rewrite the document from the last run's numbers")  # fmt: skip
    args = parser.parse_args(sys.argv[1:])  # anything else: one line and exit 2, no run
    out = ROOT / "results" / "validation"
    saved = out / "validation.json"
    if args.doc_only:  # rewrite the document from the last run's numbers
        data = json.loads(saved.read_text())
        publish_runs(out)
        doc = write_doc(ROOT / "docs" / "VALIDATION.md", data["facts"], data["results"],
                        SCENARIOS, ROOT / FIT)  # fmt: skip
        print(f"wrote {doc}")
        return 0
    signal.signal(signal.SIGTERM, _stop)
    quick = os.environ.get("LYRA_QUICK") == "1"
    repeats = int(os.environ.get("LYRA_VALIDATE_REPEATS", "3"))
    started = time.time()
    facts: dict[str, Any] = {
        "quick": quick,
        "repeats": repeats,
        "cpu": (cpu_model() or "unknown"),
        "cores": os.cpu_count(),
        "load_start": load_average(),
        "server_flags": SERVER_FLAGS,
        "cmake_flags": list(llamacpp.CMAKE_FLAGS),
        "sdist": llamacpp.SDIST,
        "extra_body": EXTRA_BODY,
    }
    binary = llamacpp.server_binary()
    model = llamacpp.model_file()
    facts["binary"] = str(binary).replace(str(Path.home()), "~")
    facts["model"] = model.name
    base = ["--quick"] if quick else []
    with llamacpp.Server(binary, model, SERVER_FLAGS, out / "llama-server.log") as srv:
        facts["props"] = check_endpoint(srv.url)
        commands: list[str] = []  # (for the document; the port written $URL)
        run = functools.partial(lyra_cli.run, log=commands, url=srv.url)
        flags = " ".join(SERVER_FLAGS)
        run("profile", "--endpoint", srv.url, "--out", PROFILE, "--grid", GRID, "--flags", flags)
        run("calibrate", PROFILE, "--out", FIT, "--figure", f"{FIG_DIR}/profile_fit.png")
        run("run", "validation/closed_loop_8.yaml", "--out", str(out / "capacity"), "--no-figures")
        capacity = json.loads(
            (sim_folder(out / "capacity" / "closed_loop_8") / "summary.json").read_text()
        )["request_throughput"]
        facts["capacity_req_s"] = capacity
        facts["load"] = LOAD
        results = {}
        for name in SCENARIOS:
            path = f"validation/{name}.yaml"
            if name in LOAD:
                rate = f"workload.arrival.rate_per_s={LOAD[name] * capacity:.3f}"
                q = [*base, "--set", rate]
            else:
                q = base
            run("run", path, "--out", str(out / "sim"), "--no-figures", *q)
            reals = []
            for k in range(repeats):
                real = str(out / "real" / name / f"run{k + 1}")
                run("replay", path, "--endpoint", srv.url, "--out", real, "--timeout-s", "120",
                    "--time-limit-s", "900", "--extra-body", EXTRA_BODY, *q)  # fmt: skip
                reals.append(real)
            table = out / f"{name}_compare.json"
            sim = str(sim_folder(out / "sim" / name))
            run("compare", sim, *reals, "--figure", f"{FIG_DIR}/{name}_cdf.png", "--json",
                str(table))  # fmt: skip
            results[name] = json.loads(table.read_text())
            results[name + "@diagnostics"] = diagnostics(Path(sim), [Path(r) for r in reals])
    facts["load_end"] = load_average()
    facts["wall_min"] = round((time.time() - started) / 60.0, 1)
    facts["commands"] = commands
    saved.write_text(json.dumps({"facts": facts, "results": results}, indent=1) + "\n")
    publish_runs(out)
    doc = write_doc(ROOT / "docs" / "VALIDATION.md", facts, results, SCENARIOS, ROOT / FIT)
    print(f"\nwrote {doc}")
    return 0


PUBLISHED = ("requests.jsonl", "summary.json", "manifest.json")
"""What of each run goes into ``docs/validation``: enough to redraw the sim-vs-real
figure (``lyra-simpy figures --only sim_vs_real``) and to check the tables."""


def publish_runs(out: Path) -> None:
    """Copy every workload's simulated run and real runs into ``docs/validation/sim/<w>``
    and ``docs/validation/real/<w>/run<k>`` (the layout the paper figure reads)."""
    import shutil

    dest = ROOT / FIG_DIR
    for name in SCENARIOS:
        pairs = [(sim_folder(out / "sim" / name), dest / "sim" / name)]
        pairs += [
            (r, dest / "real" / name / r.name) for r in sorted((out / "real" / name).glob("run*"))
        ]
        for src, dst in pairs:
            if dst.exists():
                shutil.rmtree(dst)
            dst.mkdir(parents=True)
            for file in PUBLISHED:
                if (src / file).is_file():
                    shutil.copy2(src / file, dst / file)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
