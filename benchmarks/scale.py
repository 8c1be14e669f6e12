"""Scale benchmark: a million requests over 16 replicas, on one core.

The workload of ``speed.py`` (Azure LLM inference 2023 conversation lengths, drawn
jointly and capped at 4096 tokens in all; continuous batching with 128 sequences and a
4096-token budget, 7000 KV blocks of 16 tokens, a linear Llama-2-7B-on-A100 cost) on
16 such replicas behind a router, with Poisson arrivals at 16 x 4 = 64 req/s: the
per-replica load of ``speed.py``, where each replica decodes a batch of dozens of
sequences most of the time (see the printed tokens per iteration). The per-iteration
time series is off (one row per iteration is the one thing that would grow with the
run's length beyond per-request state).

Each size runs in a fresh child process, so its peak resident memory (``ru_maxrss``)
is its own. Printed per size: the child's whole wall time, ``simulate()`` wall time,
requests and engine iterations per second, peak RSS, and the peak RSS minus that of
an import-only child, per request and per output token. Memory must grow with
requests (compact per-request arrays, one ITL entry per iteration), not with tokens.

Targets (issue 7): 1 000 000 requests in ≤ 3 minutes and ≤ 1 GB peak RSS on one core
(the simulator is single-threaded; ``taskset -c 0`` pins it where available).
``--check`` exits 1 when one is missed.

``--router all`` runs the full size once per router (every name in the routers'
registry) and prints one row each. Routers that read no state (``round_robin``,
``random``) route ahead; for those that read the replicas' state
(``least_outstanding``, ``least_kv``, ``power_of_two``, ``cache_aware``) fused runs are
carried across arrivals (``lyra_simpy.cluster.Dispatcher.carry``). Each row also gives
the child's CPU time, the figure to compare on a machine shared with other work.

Usage: ``python benchmarks/scale.py [--requests N] [--replicas R] [--router NAME|all]
[--check]`` (``tox -e bench-scale``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TARGET_S = 180.0
TARGET_RSS_MB = 1000.0


def child(requests: int, replicas: int, router: str) -> dict[str, Any]:
    """Simulate one size in this process; the figures as a mapping."""
    t0 = time.perf_counter()
    sys.path.insert(0, str(HERE))
    import lyra_simpy
    from speed import REPO_ROOT, trace_path, workload

    out: dict[str, Any] = {"requests": requests}
    if requests:
        trace = trace_path()
        if not trace.is_file():
            raise SystemExit(f"scale.py: trace not found: {trace} (see benchmarks/README.md)")
        raw = workload(trace, requests, True)
        raw["name"] = "bench_scale"
        raw["workload"]["arrival"]["rate_per_s"] = 4.0 * replicas
        raw["cluster"] = {"replicas": replicas, "router": {"name": router}}
        raw["simulation"]["timeseries"] = False
        scenario = lyra_simpy.scenario_from_dict(raw, base_dir=REPO_ROOT)
        t1 = time.perf_counter()
        res = lyra_simpy.simulate(scenario)
        sim_s = time.perf_counter() - t1
        out.update(
            simulate_s=sim_s,
            completed=res.summary["completed"],
            output_tokens=res.summary["total_output_tokens"],
            iterations=res.engine["iterations"],
            median_ttft_ms=res.summary["median_ttft_ms"],
            simulated_s=res.engine["end_s"],
        )
    out["process_s"] = time.perf_counter() - t0
    out["cpu_s"] = time.process_time()
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def spawn(requests: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", str(requests), "--replicas", str(args.replicas)]
    cmd += ["--router", args.router]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if done.returncode:
        sys.stderr.write(done.stderr)
        raise SystemExit(done.returncode)
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["wall_s"] = wall
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=1_000_000)
    p.add_argument("--replicas", type=int, default=16)
    p.add_argument("--router", default="round_robin")
    p.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, args.replicas, args.router)))
        return 0
    base = spawn(0, args)
    print(f"import-only child: {base['wall_s']:.2f} s, peak RSS {base['peak_rss_mb']:.0f} MB")
    if args.router == "all":
        return every_router(args, base)
    rows = [spawn(n, args) for n in (args.requests // 4, args.requests)]
    print(
        f"{'requests':>10} {'wall (s)':>9} {'simulate':>9} {'req/s':>8} {'iter/s':>8} "
        f"{'tok/iter':>8} {'p50 TTFT':>8} {'peak RSS':>9} {'B/request':>9} {'B/out tok':>9}"
    )
    for r in rows:
        extra = (r["peak_rss_mb"] - base["peak_rss_mb"]) * 2**20
        print(
            f"{r['requests']:>10,} {r['wall_s']:>9.1f} {r['simulate_s']:>9.1f} "
            f"{r['requests'] / r['simulate_s']:>8,.0f} {r['iterations'] / r['simulate_s']:>8,.0f} "
            f"{r['output_tokens'] / r['iterations']:>8.1f} {r['median_ttft_ms']:>6.0f}ms "
            f"{r['peak_rss_mb']:>7.0f}MB "
            f"{extra / r['requests']:>9.0f} {extra / r['output_tokens']:>9.1f}"
        )
    big = rows[-1]
    print(
        f"{args.requests:,} requests, {args.replicas} replicas ({args.router}), "
        f"{big['iterations']:,} iterations, {big['simulated_s']:,.0f} s simulated; "
        f"pinned to one core: {'yes' if shutil.which('taskset') else 'no (no taskset)'}; "
        f"cores here: {os.cpu_count()}"
    )
    met = big["wall_s"] <= TARGET_S and big["peak_rss_mb"] <= TARGET_RSS_MB
    print(
        f"targets: wall <= {TARGET_S:.0f} s: {big['wall_s']:.0f} s; peak RSS <= "
        f"{TARGET_RSS_MB:.0f} MB: {big['peak_rss_mb']:.0f} MB -> {'met' if met else 'MISSED'}"
    )
    return 1 if args.check and not met else 0


def every_router(args: argparse.Namespace, base: dict[str, Any]) -> int:
    """The full size once per router: one row each, and whether every one met the targets."""
    from lyra_simpy.cluster.routing import ROUTERS

    print(
        f"{'router':>18} {'wall (s)':>9} {'CPU (s)':>8} {'simulate':>9} {'req/s':>8} "
        f"{'iter/s':>8} {'p50 TTFT':>8} {'peak RSS':>9}"
    )
    all_met = True
    for router in ROUTERS:
        r = spawn(args.requests, argparse.Namespace(**{**vars(args), "router": router}))
        met = r["wall_s"] <= TARGET_S and r["peak_rss_mb"] <= TARGET_RSS_MB
        all_met = all_met and met
        print(
            f"{router:>18} {r['wall_s']:>9.1f} {r['cpu_s']:>8.1f} {r['simulate_s']:>9.1f} "
            f"{r['requests'] / r['simulate_s']:>8,.0f} {r['iterations'] / r['simulate_s']:>8,.0f} "
            f"{r['median_ttft_ms']:>6.0f}ms {r['peak_rss_mb']:>7.0f}MB  "
            f"{'met' if met else 'MISSED'}",
            flush=True,
        )
    print(
        f"{args.requests:,} requests, {args.replicas} replicas; targets: wall <= "
        f"{TARGET_S:.0f} s, peak RSS <= {TARGET_RSS_MB:.0f} MB per router -> "
        f"{'met' if all_met else 'MISSED'}; import-only child {base['peak_rss_mb']:.0f} MB"
    )
    return 1 if args.check and not all_met else 0


if __name__ == "__main__":
    sys.exit(main())
