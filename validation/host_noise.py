"""How steady is this machine? A fixed piece of CPU work timed again and again.

``python validation/host_noise.py [SECONDS]`` (default 60) runs, every 0.5 s, the same
work on one thread — 200 products of two 256 × 256 float32 matrices and a 200 000-step
Python loop — and prints each time, then the median, the range and the 90th/10th
percentile ratio. On a steady machine the times agree within a few per cent; when they
do not, a real engine measured on it (``validate_cpu.py``, ``validate_vllm_cpu.py``) runs
at a speed that changes from one minute to the next, and a profile taken in one minute
prices steps that run at another (docs/VALIDATION-vllm.md, "What the tables show").
Run it with nothing else running.
"""

from __future__ import annotations

import os
import sys
import time

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


def main(argv: list[str]) -> int:
    seconds = float(argv[0]) if argv else 60.0
    a = np.random.default_rng(0).random((256, 256), dtype=np.float32)
    times: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        times.append(sample(a))
        time.sleep(0.5)
    print(" ".join(f"{t:.0f}" for t in times))
    p10, p50, p90 = np.percentile(times, [10, 50, 90])
    print(
        f"{len(times)} samples: median {p50:.0f} ms, range {min(times):.0f}-{max(times):.0f} ms, "
        f"p90/p10 {p90 / p10:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
