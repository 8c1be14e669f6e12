"""Side by side with Vidur: the same 10 000-request workload, whole processes, one paired run.

Runs, alternating, N times each (default 3):

- ``python -m lyra_simpy.cli run benchmarks/bench_azure_conv.yaml --no-figures --out TMP``
  as a fresh process, its result files written;
- Vidur (github.com/microsoft/vidur at 7d47513) on the same workload, as
  ``../shared/bench-vidur/run_vidur_10k.sh`` runs it: 10 000 requests, Splitwise-conv
  (Azure 2023 conversation) lengths capped at 4096 tokens, Poisson 4 req/s, one Llama-2-7B
  replica on an A100, vLLM scheduler with 128 sequences and a 4096-token budget, plots and
  chrome trace off.

Each process is timed from spawn to exit (wall); its peak RSS and CPU time (user + system)
are read from ``os.wait4``'s rusage. The script prints the medians, the ratio Vidur /
lyra-simpy (and each pair's), the machine (CPU model, cores) and the load average before,
during and after, and checks that both simulated 10 000 requests (lyra-simpy's
``summary.json`` ``completed``; the rows of Vidur's ``request_metrics.csv``). Running both
in one call, alternating, spreads a shared machine's load over both sides, so the ratio
stays meaningful where absolute times do not; the CPU-time ratio, which other processes
disturb less than wall time, is a cross-check. Absolute times are not comparable across
machines or calls.

Vidur is not a dependency. Lay out a checkout as ``../shared/bench-vidur/README.md`` says
(the source tree at 7d47513, a stand-in ``attention.csv`` when the snapshot lacks it, an
empty ``vidur/__init__.py``, a virtual environment with ``pip install vidur==0.0.26``), then::

    python benchmarks/vs_vidur.py --vidur-src DIR --vidur-python VENV/bin/python
    VIDUR_SRC=DIR VIDUR_PY=PY tox -e bench-vidur

Both sides start from compiled bytecode, as an installed package or a second run does:
before timing, ``compileall`` compiles lyra-simpy's package and Vidur's ``vidur`` folder, and
``PYTHONDONTWRITEBYTECODE`` is dropped from both environments (with it set, every run would
compile lyra-simpy's modules again, ~0.1-0.2 s, a cost no user's second run pays).

When Vidur's execution-time predictor is not cached yet (no ``*.pkl`` under
``VIDUR_SRC/cache``), one untimed Vidur run trains it first (about a minute). Exit status:
0 when every run finished and simulated 10 000 requests, 1 otherwise, 2 when Vidur is not
given.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lyra_simpy
from lyra_simpy.machine import cpu_model

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_YAML = REPO_ROOT / "benchmarks" / "bench_azure_conv.yaml"
REQUESTS = 10_000
HOWTO = "../shared/bench-vidur/README.md"

# The arguments of ../shared/bench-vidur/run_vidur_10k.sh (copied; keep them in step),
# run from the Vidur source tree with WANDB_MODE=disabled. The output folder is appended.
VIDUR_ARGS = [
    "--replica_config_device", "a100",
    "--replica_config_model_name", "meta-llama/Llama-2-7b-hf",
    "--cluster_config_num_replicas", "1",
    "--replica_config_tensor_parallel_size", "1",
    "--replica_config_num_pipeline_stages", "1",
    "--request_generator_config_type", "synthetic",
    "--synthetic_request_generator_config_num_requests", str(REQUESTS),
    "--length_generator_config_type", "trace",
    "--trace_request_length_generator_config_trace_file",
    "./data/processed_traces/splitwise_conv.csv",
    "--trace_request_length_generator_config_max_tokens", "4096",
    "--interval_generator_config_type", "poisson",
    "--poisson_request_interval_generator_config_qps", "4",
    "--replica_scheduler_config_type", "vllm",
    "--vllm_scheduler_config_batch_size_cap", "128",
    "--vllm_scheduler_config_max_tokens_in_batch", "4096",
    "--no-metrics_config_store_plots",
    "--no-metrics_config_enable_chrome_trace",
    "--random_forrest_execution_time_predictor_config_num_estimators", "250",
    "--random_forrest_execution_time_predictor_config_max_depth", "16",
    "--random_forrest_execution_time_predictor_config_min_samples_split", "2",
    "--random_forrest_execution_time_predictor_config_k_fold_cv_splits", "3",
]  # fmt: skip


def timed(
    cmd: list[str], cwd: Path, env: dict[str, str], log: Path
) -> tuple[float, float, float, int]:
    """Run *cmd* as a fresh process: wall seconds, CPU seconds (user + system, the process
    and the children it waited for), peak RSS (MiB), exit code. stdout and stderr go to *log*."""
    with log.open("wb") as fh:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    return wall, cpu, usage.ru_maxrss / 1024.0, proc.returncode


def lyra_requests(out: Path) -> int | None:
    """Requests lyra-simpy completed, from the run's ``summary.json``."""
    found = sorted(out.glob("**/summary.json"))
    if len(found) != 1:
        return None
    summary = json.loads(found[0].read_text())
    return int(summary["completed"]) if summary.get("unfinished", 0) == 0 else None


def vidur_requests(out: Path) -> int | None:
    """Requests Vidur simulated: the rows of its ``request_metrics.csv``."""
    found = sorted(out.glob("*/request_metrics.csv"))
    if len(found) != 1:
        return None
    with found[0].open(newline="") as fh:
        return sum(1 for _ in csv.reader(fh)) - 1


def machine() -> str:
    """CPU model and logical cores, from /proc/cpuinfo where there is one."""
    return f"{cpu_model() or 'unknown CPU'}, {os.cpu_count()} logical cores"


def load() -> str:
    try:
        return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:
        return "n/a"


def tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--vidur-src",
        default=os.environ.get("VIDUR_SRC"),
        help="Vidur source tree at 7d47513 (or $VIDUR_SRC)",
    )
    parser.add_argument(
        "--vidur-python",
        default=os.environ.get("VIDUR_PY"),
        help="a Python with Vidur's dependencies (or $VIDUR_PY)",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs of each, alternating (3)")
    args = parser.parse_args(argv)

    if not args.vidur_src or not args.vidur_python:
        print(
            "vs_vidur.py needs a Vidur checkout: --vidur-src DIR --vidur-python PY "
            f"(or VIDUR_SRC / VIDUR_PY); how to lay one out: {HOWTO}"
        )
        return 2
    src = Path(args.vidur_src).resolve()
    vpy = Path(args.vidur_python)
    if not (src / "vidur" / "main.py").is_file() or not (src / "vidur" / "__init__.py").is_file():
        print(f"vs_vidur.py: {src} lacks vidur/main.py or vidur/__init__.py; see {HOWTO}")
        return 2
    if not os.access(vpy, os.X_OK):
        print(f"vs_vidur.py: {vpy} is not an executable Python; see {HOWTO}")
        return 2

    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    lyra_env = dict(base, MPLBACKEND="Agg")
    vidur_env = {k: v for k, v in base.items() if k != "PYTHONPATH"}
    vidur_env["WANDB_MODE"] = "disabled"
    lyra_cmd = [sys.executable, "-m", "lyra_simpy.cli", "run", str(BENCH_YAML), "--no-figures"]
    vidur_cmd = [str(vpy), "-m", "vidur.main", *VIDUR_ARGS]

    for python, folder in (
        (sys.executable, Path(lyra_simpy.__file__).parent),
        (vpy, src / "vidur"),
    ):
        subprocess.run([str(python), "-m", "compileall", "-q", str(folder)], check=True)
    print(f"machine: {machine()}; Python {sys.version.split()[0]}")
    print(f"load average before: {load()}")
    rows: dict[str, list[tuple[float, float, float]]] = {"lyra-simpy": [], "Vidur": []}
    bad: list[str] = []
    with tempfile.TemporaryDirectory(prefix="vs_vidur_") as tmp:
        root = Path(tmp)
        if not any((src / "cache").glob("*.pkl")):
            out = root / "vidur-train"
            print("Vidur: training its execution-time predictor (untimed, about a minute) ...")
            cmd = [*vidur_cmd, "--metrics_config_output_dir", str(out)]
            wall, _, _, rc = timed(cmd, src, vidur_env, root / "vidur-train.log")
            if rc != 0:
                print(f"Vidur exited {rc}:\n{tail(root / 'vidur-train.log')}")
                return 1
            print(f"  done in {wall:.1f} s")
        for i in range(args.runs):
            for name in ("lyra-simpy", "Vidur"):
                out = root / f"{name}-{i}"
                log = root / f"{name}-{i}.log"
                if name == "lyra-simpy":
                    cmd, cwd, env = [*lyra_cmd, "--out", str(out)], REPO_ROOT, lyra_env
                else:
                    cmd = [*vidur_cmd, "--metrics_config_output_dir", str(out)]
                    cwd, env = src, vidur_env
                wall, cpu, rss, rc = timed(cmd, cwd, env, log)
                if rc != 0:
                    print(f"{name} run {i + 1} exited {rc}:\n{tail(log)}")
                    return 1
                n = lyra_requests(out) if name == "lyra-simpy" else vidur_requests(out)
                ok = n == REQUESTS
                if not ok:
                    bad.append(f"{name} run {i + 1}: {n} requests, not {REQUESTS}")
                rows[name].append((wall, cpu, rss))
                print(
                    f"  run {i + 1} {name:<10} {wall:7.2f} s wall {cpu:7.2f} s CPU {rss:5.0f} MiB  "
                    f"{n} requests{'' if ok else '  <-- WRONG'}  (load {load()})"
                )
    print(f"load average after: {load()}")

    med = {k: [statistics.median(col) for col in zip(*v, strict=True)] for k, v in rows.items()}
    print(f"\nwhole process, median of {args.runs} alternating runs each:")
    print(f"| {'':<12} | {'wall':>8} | {'CPU':>8} | {'peak RSS':>9} |")
    for name, (wall, cpu, rss) in med.items():
        print(f"| {name:<12} | {wall:6.2f} s | {cpu:6.2f} s | {rss:5.0f} MiB |")
    (v_wall, v_cpu, v_rss), (l_wall, l_cpu, l_rss) = med["Vidur"], med["lyra-simpy"]
    pairs = " ".join(
        f"{v[0] / ly[0]:.1f}x" for ly, v in zip(rows["lyra-simpy"], rows["Vidur"], strict=True)
    )
    print(
        f"ratio Vidur / lyra-simpy: {v_wall / l_wall:.1f}x wall (medians; pair by pair: {pairs}), "
        f"{v_cpu / l_cpu:.1f}x CPU, {v_rss / l_rss:.1f}x peak RSS"
    )
    print(f"requests simulated: {'both 10 000, every run' if not bad else '; '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
