"""Speed benchmark: the Azure-conversation workload Vidur is usually shown on.

10 000 requests with (input, output) lengths drawn jointly from the Azure LLM inference
2023 conversation trace (capped at 4096 tokens in all), Poisson arrivals at 4 req/s,
continuous batching (128 sequences, 4096-token budget), 7000 KV blocks of 16 tokens, one
replica, a linear cost model of Llama-2-7B on an A100.

Printed first: what the user waits for, ``lyra-simpy run benchmarks/bench_azure_conv.yaml
--no-figures`` as a fresh process with its result files written (median of 3, peak RSS),
and the start-up of ``import lyra_simpy`` and ``lyra-simpy --help`` against a bare
``import numpy`` in the same run. Then the details: the in-script whole-process time
(interpreter start → results of the fused run in hand, no files written), import
time, trace read, ``simulate()`` wall time, simulated requests per second, engine
iterations per second, the raw SimPy rate (a bare loop of ``yield env.timeout``
in this process) and the ratio of the two; then the same workload with
``simulation.fuse_iterations: false`` and a check that both runs agree exactly.
Targets (DESIGN §6 asks for ratios, not absolute times): whole process ≤ 2 s, engine
iterations/s ≥ 25 % of the raw SimPy rate, the run's result files written in ≤ 0.1 s
(best of 3). It is a report: exit status 0 whatever the
figures, unless ``--check`` is given (then 1 when a target is missed or the runs differ).

Usage: ``python benchmarks/speed.py [--requests N] [--profile] [--check]``
(``tox -e bench -- --check``). The trace, ``azure-conv-2023``, ships with the package
(``lyra-simpy traces list``; ``$LYRA_TRACES_DIR`` points at another copy).
"""

from __future__ import annotations

import time

_T_SCRIPT = time.perf_counter()  # first thing: everything below is timed from here


def _since_process_start() -> float | None:
    """Seconds since this process was created (Linux ``/proc``), or None elsewhere."""
    try:
        import os

        with open("/proc/self/stat") as fh:
            stat = fh.read()
        # Field 22 (starttime, clock ticks since boot); fields after the ")" of comm.
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        now_s = time.clock_gettime(time.CLOCK_BOOTTIME)
        return max(now_s - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


_STARTUP_S = _since_process_start()  # interpreter start-up before the first line

import argparse  # noqa: E402
import cProfile  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pstats  # noqa: E402
import sys  # noqa: E402
from collections.abc import Generator  # noqa: E402
from importlib.metadata import version  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

_T_IMPORT = time.perf_counter()
import numpy as np  # noqa: E402
import simpy  # noqa: E402

import lyra_simpy  # noqa: E402
from lyra_simpy.workload.catalog import resolve_path  # noqa: E402
from lyra_simpy.workload.traces import read_trace  # noqa: E402

_PlainEnvironment = simpy.Environment

_IMPORT_S = time.perf_counter() - _T_IMPORT

REPO_ROOT = Path(__file__).resolve().parent.parent
TRACE_NAME = "azure-conv-2023"
TARGET_WHOLE_S = 2.0
TARGET_RATIO = 0.25
TARGET_FILES_S = 0.1
RAW_TIMEOUTS = 300_000
RAW_REPEATS = 3


def trace_path() -> Path:
    """The Azure conversation trace, by its name in the catalog (the package's copy)."""
    return resolve_path(TRACE_NAME, REPO_ROOT)


BENCH_YAML = REPO_ROOT / "benchmarks" / "bench_azure_conv.yaml"


def workload(trace: Path, requests: int, fuse: bool) -> dict[str, Any]:
    """The scenario of ``bench_azure_conv.yaml`` as a mapping, with *requests* requests,
    iterations fused or not, and the trace at *trace*."""
    import yaml

    raw: dict[str, Any] = yaml.safe_load(BENCH_YAML.read_text())
    raw["workload"]["num_requests"] = requests
    for field in ("input_tokens", "output_tokens"):
        raw["workload"][field]["path"] = str(trace)
    raw["simulation"] = {"fuse_iterations": fuse}
    return raw


def command_run(requests: int, out: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of ``lyra-simpy run bench_azure_conv.yaml
    --no-figures`` as a fresh process, results written to *out*: what a user waits for."""
    import subprocess

    cmd = [sys.executable, "-m", "lyra_simpy.cli", "run", str(BENCH_YAML), "--no-figures"]
    cmd += ["--out", str(out), "--set", f"workload.num_requests={requests}"]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"speed.py: {' '.join(cmd)} exited {proc.returncode}")
    return wall, usage.ru_maxrss / 1024.0


class _CountingEnvironment(_PlainEnvironment):
    """A plain SimPy environment that remembers itself, to count the events it ran."""

    created: list[simpy.Environment] = []  # noqa: RUF012

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.created.append(self)


def _events(env: simpy.Environment) -> int | None:
    """Events scheduled in *env* (SimPy numbers them with a private counter)."""
    eid = getattr(env, "_eid", None)
    return None if eid is None else next(eid)


def run(raw: dict[str, Any]) -> tuple[lyra_simpy.Results, float, int | None]:
    """Simulate *raw*; returns the results, the wall time and the SimPy events."""
    scenario = lyra_simpy.scenario_from_dict(raw, base_dir=REPO_ROOT)
    _CountingEnvironment.created.clear()
    t = time.perf_counter()
    results = lyra_simpy.simulate(scenario)
    wall = time.perf_counter() - t
    envs = _CountingEnvironment.created
    return results, wall, (_events(envs[-1]) if envs else None)


def raw_simpy_rate(n: int = RAW_TIMEOUTS, repeats: int = RAW_REPEATS) -> float:
    """Timeouts per second of a bare SimPy process (best of *repeats* loops of *n*)."""

    def loop(env: simpy.Environment) -> Generator[simpy.Event, Any, None]:
        timeout = env.timeout
        for _ in range(n):
            yield timeout(0.001)

    best = float("inf")
    for _ in range(repeats):
        env = _PlainEnvironment()
        env.process(loop(env))
        t = time.perf_counter()
        env.run()
        best = min(best, time.perf_counter() - t)
    return n / best


def files_time(res: lyra_simpy.Results, folder: Path) -> float:
    """Wall time of writing *res*'s result files as ``lyra-simpy run`` does
    (``requests.jsonl``, ``summary.json``, ``timeseries.npz``, ``itl.csv``, the manifest)."""
    from lyra_simpy.output.writer import write_variant

    t = time.perf_counter()
    write_variant(res, folder, None)
    return time.perf_counter() - t


def differences(a: lyra_simpy.Results, b: lyra_simpy.Results) -> list[str]:
    """What differs between two runs' observables (empty when identical)."""
    out = []
    if json.dumps(a.summary, sort_keys=True) != json.dumps(b.summary, sort_keys=True):
        out.append("summary")
    if list(a.requests()) != list(b.requests()):
        out.append("requests")
    if a.timeseries.keys() != b.timeseries.keys() or any(
        a.timeseries[k].tobytes() != b.timeseries[k].tobytes() for k in a.timeseries
    ):
        out.append("timeseries")
    if any(x.tobytes() != y.tobytes() for x, y in zip(a.itl_s, b.itl_s, strict=True)):
        out.append("itl")
    if a.engine != b.engine:
        out.append("engine")
    return out


def start_up_times(repeats: int = 5) -> dict[str, float]:
    """Median wall time of fresh processes, run alternately in this call: a bare
    ``import numpy`` (the reference), ``import lyra_simpy`` and ``lyra-simpy --help``."""
    import statistics
    import subprocess

    commands = {
        "import numpy": [sys.executable, "-c", "import numpy"],
        "import lyra_simpy": [sys.executable, "-c", "import lyra_simpy"],
        "lyra-simpy --help": [sys.executable, "-m", "lyra_simpy.cli", "--help"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, cmd in commands.items():
            t = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}/s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000, help="requests (default 10000)")
    parser.add_argument("--profile", action="store_true", help="cProfile the fused run (top 25)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    if args.requests < 1:
        parser.error("--requests must be >= 1")

    trace = trace_path()

    # Fused run first: the whole-process figure is what one `simulate` of it costs.
    t = time.perf_counter()
    read_trace(trace, "azure")  # parsed once per process (cached); timed on its own
    trace_s = time.perf_counter() - t
    simpy.Environment = _CountingEnvironment  # type: ignore[misc]  # simulate() makes its env
    fused, fused_s, fused_events = run(workload(trace, args.requests, fuse=True))
    t_done = time.perf_counter()
    script_s = t_done - _T_SCRIPT
    whole_s = script_s + (_STARTUP_S or 0.0)

    raw_rate = raw_simpy_rate()
    # Best of RAW_REPEATS for simulate() too, as for the raw rate: both sides of the
    # ratio are measured the same way (the first, cold run gives the whole-process time).
    warm_s = [run(workload(trace, args.requests, fuse=True))[1] for _ in range(RAW_REPEATS - 1)]
    best_fused_s = min([fused_s, *warm_s])
    plain, plain_s, plain_events = run(workload(trace, args.requests, fuse=False))
    simpy.Environment = _PlainEnvironment  # type: ignore[misc]
    diff = differences(fused, plain)

    iters = int(fused.engine["iterations"])
    fused_rate = iters / best_fused_s
    plain_rate = int(plain.engine["iterations"]) / plain_s
    ratio = fused_rate / raw_rate
    completed = fused.summary["completed"]

    per_event = "" if not fused_events else f"{iters / fused_events:.1f} iterations per event"
    ok_whole = whole_s <= TARGET_WHOLE_S
    ok_ratio = ratio >= TARGET_RATIO
    mark = {True: "ok", False: "MISSED"}
    startup = "n/a" if _STARTUP_S is None else f"{_STARTUP_S:.3f} s"
    import statistics
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        files_s = min(files_time(fused, Path(tmp) / f"files{k}") for k in range(RAW_REPEATS))
        runs = [command_run(args.requests, Path(tmp) / f"run{k}") for k in range(RAW_REPEATS)]
    ok_files = files_s <= TARGET_FILES_S
    run_s = statistics.median(r[0] for r in runs)
    run_rss = max(r[1] for r in runs)
    starts = start_up_times()
    ref = starts["import numpy"]
    rows = [
        (
            "lyra-simpy run (whole process)",
            f"{run_s:.3f} s",
            f"median of {RAW_REPEATS}, results written, peak RSS {run_rss:.0f} MiB",
        ),
        *(
            (f"{name} (fresh process)", f"{t:.3f} s", f"x{t / ref:.2f} of a bare import numpy")
            for name, t in starts.items()
        ),
        ("workload", f"{args.requests} requests, Azure conv 2023, Poisson 4/s", ""),
        ("simulated", f"{fused.engine['end_s']:.1f} s, {completed} completed", ""),
        ("interpreter start-up", startup, ""),
        ("import lyra_simpy", f"{_IMPORT_S:.3f} s", ""),
        ("trace read", f"{trace_s:.3f} s", ""),
        ("simulate() (fused)", f"{fused_s:.3f} s", f"best of {RAW_REPEATS}: {best_fused_s:.3f} s"),
        (
            "simulate() script, whole process",
            f"{whole_s:.3f} s",
            f"<= {TARGET_WHOLE_S:g} s  {mark[ok_whole]} (no result files)",
        ),
        (
            "result files written",
            f"{files_s:.3f} s",
            f"best of {RAW_REPEATS}, <= {TARGET_FILES_S:g} s  {mark[ok_files]}",
        ),
        ("requests/s (wall)", _fmt_rate(args.requests / best_fused_s), ""),
        ("engine iterations", f"{iters:,}", ""),
        ("SimPy events (fused)", "n/a" if fused_events is None else f"{fused_events:,}", per_event),
        ("iterations/s (fused)", _fmt_rate(fused_rate), ""),
        ("raw SimPy timeouts/s", _fmt_rate(raw_rate), f"best of {RAW_REPEATS} x {RAW_TIMEOUTS:,}"),
        ("ratio fused/raw", f"{ratio:.1%}", f">= {TARGET_RATIO:.0%}  {mark[ok_ratio]}"),
        ("simulate() (unfused)", f"{plain_s:.3f} s", ""),
        ("SimPy events (unfused)", "n/a" if plain_events is None else f"{plain_events:,}", ""),
        ("iterations/s (unfused)", _fmt_rate(plain_rate), f"ratio {plain_rate / raw_rate:.1%}"),
        ("fused == unfused", "OK" if not diff else "MISMATCH: " + ", ".join(diff), ""),
    ]
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    print(f"lyra-simpy {version('lyra-simpy')} speed benchmark")
    print(f"python {sys.version.split()[0]}, simpy {simpy.__version__}, numpy {np.__version__}")
    for name, value, note in rows:
        print(f"  {name:<{width}}  {value:>{vwidth}}  {note}".rstrip())

    if args.profile:
        scenario = lyra_simpy.scenario_from_dict(
            workload(trace, args.requests, fuse=True), base_dir=REPO_ROOT
        )
        profiler = cProfile.Profile()
        profiler.runcall(lyra_simpy.simulate, scenario)
        print("\ncProfile of simulate() (fused), top 25 by cumulative time:")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(25)

    if args.check and (diff or not ok_whole or not ok_ratio or not ok_files):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
