"""Same seed, same bytes: a sweep's table does not move with the BLAS thread count nor
with the executor (issue: ``np.dot`` summed the ITL mean in a thread-dependent order, so
a Dask worker, whose nanny sets ``OPENBLAS_NUM_THREADS=1``, wrote other last digits).

Each run is a fresh process with its own thread settings, so the test does not depend
on what BLAS happens to do in the process that runs the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


BASE = {
    "name": "classroom",
    "seed": 2024,
    "workload": {
        "num_requests": 400,
        "arrival": {"name": "poisson", "rate_per_s": 2.5},
        "input_tokens": {"name": "uniform", "low": 64, "high": 512},
        "output_tokens": {"name": "lognormal", "mean": 128, "sigma": 0.8, "min": 8, "max": 1024},
    },
    "scheduler": {"name": "continuous", "max_num_seqs": 16, "max_num_batched_tokens": 8192},
    "kv_cache": {"block_size": 16, "num_blocks": 8192},
    "cost": {"name": "linear", "base_ms": 15, "per_seq_ms": 1, "padding": "max_batch"},
    "slo": {"ttft_ms": 300, "tpot_ms": 40},
}
"""The classroom engine (15 ms + 1 ms per sequence) under 400 requests of ~128 tokens:
ITL pairs long enough for a blocked BLAS sum to differ from a serial one. Before the fix
these four points wrote other last digits of ``mean_itl_ms`` under 1 and 2 threads."""


def _sweep_file(tmp_path: Path) -> Path:
    sweep = {
        "base": BASE,
        "grid": {"scheduler.max_num_seqs": [4, 8], "workload.arrival.rate_per_s": [1.0, 2.0]},
        "seeds": 1,
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def _run(tmp_path: Path, name: str, threads: str | None, *extra: str) -> bytes:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    if threads is not None:
        env.update(dict.fromkeys(THREAD_VARS, threads))
    out = tmp_path / name
    cmd = [sys.executable, "-m", "lyra_simpy.cli", "sweep", str(_sweep_file(tmp_path))]
    subprocess.run(
        [*cmd, "--out", str(out), "--quiet", *extra],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return (out / "sweep.csv").read_bytes()


def test_the_table_does_not_move_with_blas_threads_or_executor(tmp_path):
    default = _run(tmp_path, "default", None, "--workers", "1")
    assert _run(tmp_path, "one_thread", "1", "--workers", "1") == default
    assert _run(tmp_path, "two_threads", "2", "--workers", "1") == default
    assert _run(tmp_path, "pool", None, "--workers", "2") == default


def test_the_dask_executor_writes_the_in_process_table(tmp_path):
    pytest.importorskip("distributed")
    default = _run(tmp_path, "default", None, "--workers", "1")
    # `--dask local` starts worker processes under a nanny (OPENBLAS_NUM_THREADS=1)
    assert _run(tmp_path, "dask", None, "--dask", "local") == default


def test_a_profile_fitted_on_load_gives_the_same_summary_whatever_the_threads(tmp_path):
    scenario = yaml.safe_load((ROOT / "scenarios" / "lab02_goodput_vs_batch.yaml").read_text())
    scenario = {
        k: scenario[k] for k in ("name", "seed", "workload", "scheduler", "kv_cache", "slo")
    }
    scenario["cost"] = {"name": "profile", "path": str(ROOT / "tests/data/synthetic_profile.csv")}
    path = tmp_path / "fitted.yaml"
    path.write_text(yaml.safe_dump(scenario))
    summaries = []
    for threads in (None, "1", "2"):
        env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
        if threads is not None:
            env.update(dict.fromkeys(THREAD_VARS, threads))
        out = tmp_path / f"run{threads}"
        cmd = [sys.executable, "-m", "lyra_simpy.cli", "run", str(path), "--no-figures"]
        subprocess.run([*cmd, "--out", str(out)], env=env, check=True, capture_output=True)
        (summary,) = sorted(out.rglob("summary.json"))
        summaries.append(summary.read_bytes())
    assert summaries[1] == summaries[0]
    assert summaries[2] == summaries[0]
