"""The vLLM CPU validation matrix's definition, shared by every tool that reads it
(``validate_vllm_cpu.py`` runs it, :mod:`vllm_tables` redoes its tables from stored runs,
:mod:`vllm_report` writes its document; ``vllm_drift.py`` and ``vllm_contention.py`` read
its points): where its files go, the server configurations, workloads and loads, the
probes, the columns and the scenario each load is simulated with."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from lyra_simpy.calibration.profiles import request_path_ms
from lyra_simpy.live import vllm_cpu
from lyra_simpy.presets.vllm import cpu_kv_blocks

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


def write_yaml(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def real_runs(key: str, load: str, repeats: int) -> list[Path]:
    cfg, workload = key.split("/")
    return [OUT / f"{cfg}_{workload}" / "real" / load / f"run{k}" for k in range(1, repeats + 1)]
