"""How steady is this machine? A fixed piece of CPU work timed again and again.

``python validation/host_noise.py [SECONDS] [--json FILE]`` (default 60 s) runs, every
0.5 s, the same work on one thread — 200 products of two 256 × 256 float32 matrices and a
200 000-step Python loop — and prints each time, then the median, the range and the
90th/10th percentile ratio. On a steady machine the times agree within a few per cent; when they
do not, a real engine measured on it (``validate_cpu.py``, ``validate_vllm_cpu.py``) runs
at a speed that changes from one minute to the next, and a profile taken in one minute
prices steps that run at another (docs/VALIDATION-vllm.md, "What the tables show").
Run it with nothing else running. ``--json FILE`` also writes the times and these figures
(``validate_cpu.py --matrix --host-noise SECONDS`` keeps them with each point).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before NumPy loads its BLAS

import numpy as np


def sample(a: np.ndarray) -> float:
    """One timing of the fixed work, in ms."""
    t0 = time.perf_counter()
    for _ in range(200):
        a @ a
    x = 0
    for i in range(200_000):
        x += i
    return 1000.0 * (time.perf_counter() - t0)


def measure(seconds: float) -> dict[str, Any]:
    """The fixed work timed every 0.5 s for *seconds* (at least once): the times (ms) and
    their median, range and 90th/10th percentile ratio."""
    a = np.random.default_rng(0).random((256, 256), dtype=np.float32)
    times: list[float] = []
    end = time.monotonic() + seconds
    while not times or time.monotonic() < end:
        times.append(sample(a))
        time.sleep(0.5)
    p10, p50, p90 = np.percentile(times, [10, 50, 90])
    return {"seconds": seconds, "times_ms": [round(t, 2) for t in times],
            "median_ms": round(float(p50), 2), "min_ms": round(min(times), 2),
            "max_ms": round(max(times), 2), "p90_over_p10": round(float(p90 / p10), 3)}  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="host_noise.py", description=__doc__.split("\n")[0])
    parser.add_argument("seconds", nargs="?", type=float, default=60.0)
    parser.add_argument("--json", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)
    if not args.seconds > 0:
        parser.error(f"SECONDS: got {args.seconds:g}, must be more than 0")
    got = measure(args.seconds)
    print(" ".join(f"{t:.0f}" for t in got["times_ms"]))
    print(
        f"{len(got['times_ms'])} samples: median {got['median_ms']:.0f} ms, range "
        f"{got['min_ms']:.0f}-{got['max_ms']:.0f} ms, p90/p10 {got['p90_over_p10']:.2f}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(got, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
