"""Sweep executors benchmark: 256 points on the local process pool and on a Dask
LocalCluster, against the same sweep run in this process.

The sweep is ``sweeps/lab02_depth_x_rate.yaml`` in quick mode (150 requests a point:
4 depths × 4 rates × 16 seeds) — small points, so what is measured is mostly each
executor's overhead per point and its start-up. Printed: each executor's start-up (the Dask
cluster's; a pool's processes start inside its run), run and total wall time, and the
total's ratio to the in-process run (DESIGN §6: ratios against a reference measured in the
same run), and whether the three tables are identical byte for byte (exit status 1 if
not). Each run writes to a fresh temporary folder, so every point is computed.

Usage: ``python benchmarks/sweep_dask.py [--workers 2] [--seeds 16] [--full]``
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from lyra_simpy.sweep import run_sweep, sweep_from_dict

SWEEP = Path(__file__).resolve().parents[1] / "sweeps" / "lab02_depth_x_rate.yaml"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2, help="pool processes and Dask workers")
    p.add_argument("--seeds", type=int, default=16, help="seeds per grid point (16: 256 points)")
    p.add_argument("--full", action="store_true", help="full-size points (400 requests)")
    args = p.parse_args()
    raw = {**yaml.safe_load(SWEEP.read_text()), "seeds": args.seeds}
    sweep = sweep_from_dict(raw, SWEEP.parent, quick=not args.full, name=SWEEP.stem)
    print(f"{SWEEP.name}: {len(sweep.points)} points, {args.workers} workers")
    from distributed import Client, LocalCluster

    tables = {}
    walls: dict[str, tuple[float, float]] = {}  # name -> (start-up, run)
    with tempfile.TemporaryDirectory() as tmp:

        def timed(name: str, **kwargs: Any) -> None:
            t0 = time.perf_counter()
            report = run_sweep(sweep, Path(tmp) / name, progress=False, **kwargs)
            walls[name] = (walls.get(name, (0.0, 0.0))[0], time.perf_counter() - t0)
            assert report.computed == len(sweep.points)
            tables[name] = report.table.read_bytes()

        timed("in-process (reference)", workers=1)
        timed(f"process pool ({args.workers})", workers=args.workers)
        name = f"Dask LocalCluster ({args.workers})"
        t0 = time.perf_counter()
        with (
            LocalCluster(
                n_workers=args.workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.CRITICAL,
            ) as cluster,
            Client(cluster) as client,
        ):
            walls[name] = (time.perf_counter() - t0, 0.0)
            timed(name, dask=client)
    ref = sum(next(iter(walls.values())))
    print(f"{'executor':<28} {'start-up':>9} {'run':>8} {'total':>8}  total / in-process")
    for name, (start, run) in walls.items():
        total = start + run
        print(f"{name:<28} {start:8.2f}s {run:7.2f}s {total:7.2f}s  {total / ref:5.2f}")
    same = len(set(tables.values())) == 1
    print("tables identical:", "OK" if same else "MISMATCH")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
