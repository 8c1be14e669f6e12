"""Fused == unfused on a fixed, seeded sweep of 150 varied scenarios (DESIGN §6);
every fourth uses the fitted ``profile`` cost model instead of ``linear``.

The hypothesis properties search for counterexamples; this sweep is a wide, repeatable
net over combinations they may not reach in a run (static batches with ``until_s`` and
one-token blocks found a peak-KV difference the properties had missed).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lyra_simpy import Results, scenario_from_dict, simulate

FIT = str(Path(__file__).resolve().parents[1] / "data" / "synthetic_fit.yaml")
"""A ``profile`` cost fit (see tests/data/synthetic_profile.yaml)."""


def _scenarios(count: int = 150, seed: int = 7) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        kind = rng.choice(["poisson", "gamma", "constant", "closed"])
        if kind == "closed":
            arrival = {
                "name": "closed_loop",
                "concurrency": int(rng.integers(1, 12)),
                "think_time_s": float(rng.choice([0, 0.01, 0.2])),
            }
        elif kind == "gamma":
            arrival = {
                "name": "gamma",
                "rate_per_s": float(rng.uniform(1, 40)),
                "cv": float(rng.uniform(0.5, 4)),
            }
        else:
            arrival = {"name": str(kind), "rate_per_s": float(rng.uniform(1, 40))}
        width = int(rng.integers(1, 24))
        block_size = int(rng.choice([1, 4, 7, 16]))
        pick = rng.random()
        if pick < 0.35:
            budget = max(width, int(rng.choice([256, 1024, 8192])))
            scheduler = {
                "name": "continuous",
                "max_num_seqs": width,
                "max_num_batched_tokens": budget,
            }
            if pick < 0.1:  # prefill-only iterations (Lab 02, SGLang's loop)
                scheduler["prefills_per_iteration"] = 1 + int(pick * 30)
            elif pick < 0.17:  # prompts beside the decodes (Lab 02's tables)
                scheduler["prefill_beside_decode"] = True
        elif pick < 0.55:
            scheduler = {
                "name": "chunked_prefill",
                "max_num_seqs": width,
                "max_num_batched_tokens": max(width, int(rng.choice([16, 64, 512]))),
                "long_prefill_token_threshold": int(rng.choice([0, 0, 8])),
            }
        elif pick < 0.75:
            scheduler = {
                "name": "prefill_first",
                "max_running_requests": width,
                "chunked_prefill_size": [None, block_size * int(rng.integers(1, 20))][
                    int(rng.integers(0, 2))
                ],
                "max_prefill_tokens": int(rng.choice([64, 16384])),
                "enable_mixed_chunk": bool(rng.random() < 0.5),
                "new_token_ratio": float(rng.choice([0.0, 0.1, 0.7])),
            }
        else:
            scheduler = {
                "name": "static",
                "max_batch": width,
                "max_wait_ms": float(rng.choice([0, 50, 500])),
            }
        raw: dict[str, Any] = {
            "seed": int(rng.integers(0, 1000)),
            "workload": {
                "num_requests": int(rng.integers(5, 120)),
                "arrival": arrival,
                "input_tokens": {
                    "name": "uniform",
                    "low": 1,
                    "high": int(rng.choice([8, 64, 300])),
                },
                "output_tokens": {
                    "name": "uniform",
                    "low": 1,
                    "high": int(rng.choice([3, 40, 200])),
                },
            },
            "scheduler": scheduler,
            "kv_cache": {
                "block_size": block_size,
                "num_blocks": int(rng.choice([40, 200, 5000])),
            },
            "cost": {
                "name": "linear",
                "base_ms": float(rng.uniform(1, 20)),
                "per_seq_ms": float(rng.uniform(0, 2)),
                "per_prefill_token_ms": float(rng.uniform(0, 0.1)),
                "per_context_token_ms": float(rng.choice([0, 0.00026, 0.01])),
                "padding": ["none", "max_batch", [1, 2, 4, 8]][int(rng.integers(0, 3))],
            },
            "slo": {"ttft_ms": 200, "tpot_ms": 30},
            "simulation": {},
        }
        drawn = scheduler["name"]
        if len(out) % 5 == 4:  # every fifth: llama.cpp's server (no extra draws)
            raw["scheduler"] = scheduler = {
                "name": "llamacpp",
                "n_parallel": min(width, 8),
                "kv_unified": len(out) % 2 == 0,  # (-kvu: fused; per-slot: never fused)
                "n_batch": max(block_size * 8, 16),
                "n_ubatch": 8,
                "sliding_window": len(out) % 3 == 0,
                "cache_prompt": False,
            }
        if len(out) % 4 == 3:  # every fourth: the fitted profile model (no extra draws)
            raw["cost"] = {"name": "profile", "path": FIT, "padding": raw["cost"]["padding"]}
        if rng.random() < 0.3:
            raw["simulation"]["until_s"] = float(rng.uniform(0.5, 10))
        shares = drawn != "static" and rng.random() < 0.4
        if shares and scheduler["name"] != "llamacpp":  # shared prefixes, cached
            raw["workload"]["prefix"] = [
                {"name": "system_prompt", "groups": 3, "prefix_tokens": 64, "share": 0.8},
                {"name": "conversation", "turns": 3, "concurrent": 4},
            ][int(rng.integers(0, 2))]
            raw["prefix_cache"] = {"name": str(rng.choice(["block_hash", "radix"]))}
        out.append(raw)
    return out


def _observables(res: Results) -> list[Any]:
    series = {k: v.tolist() for k, v in res.timeseries.items()}
    itl = (res.itl_s[0].tolist(), res.itl_s[1].tolist())
    return [list(res.requests()), res.summary, series, itl, res.engine]


def _run(raw: dict[str, Any], fuse: bool) -> Results:
    raw = copy.deepcopy(raw)
    raw["simulation"]["fuse_iterations"] = fuse
    return simulate(scenario_from_dict(raw))


@pytest.mark.parametrize("policy", ["fcfs", "shortest_prompt_first"])
@pytest.mark.parametrize("block", range(5))
def test_fused_equals_unfused_on_a_seeded_sweep(block, policy):
    for i, raw in enumerate(_scenarios()[block * 30 : (block + 1) * 30]):
        if raw["scheduler"]["name"] not in ("prefill_first", "llamacpp"):  # (own orders)
            raw["scheduler"]["queue_policy"] = policy  # the same draws under either order
        fused, unfused = _run(raw, True), _run(raw, False)
        where = f"scenario {block * 30 + i}: {json.dumps(raw)}"
        assert _observables(fused) == _observables(unfused), where


def _roofline(rng: np.random.Generator, padding: Any) -> dict[str, Any]:
    return {
        "name": "roofline",
        "hardware": str(rng.choice(["a100_sxm", "h100_sxm", "b200", "max1550", "cpu_generic"])),
        "model": str(rng.choice(["gemma_3_270m", "qwen3_4b", "qwen3_5_4b", "llama_2_7b"])),
        "tp": int(rng.choice([1, 2, 4])),
        "weight_dtype": str(rng.choice(["bf16", "fp8"])),
        "kv_dtype": str(rng.choice(["bf16", "fp8"])),
        "overhead_ms": float(rng.uniform(0, 3)),
        "padding": padding,
    }


@pytest.mark.parametrize("block", range(3))
def test_fused_equals_unfused_with_the_roofline(block):
    """The same seeded scenarios with roofline costs (drawn from their own generator)."""
    rng = np.random.default_rng(1000 + block)
    for i, raw in enumerate(_scenarios()[block * 30 : (block + 1) * 30]):
        raw["cost"] = _roofline(rng, raw["cost"]["padding"])
        fused, unfused = _run(raw, True), _run(raw, False)
        where = f"roofline scenario {block * 30 + i}: {json.dumps(raw)}"
        assert _observables(fused) == _observables(unfused), where


def test_the_sweep_reaches_every_prefill_rule_of_continuous():
    # the sweep above is only as good as what it draws: continuous with prompts mixed
    # into the decodes, alone, and beside them (8 of the 150)
    drawn = [raw["scheduler"] for raw in _scenarios() if raw["scheduler"]["name"] == "continuous"]
    beside = sum(bool(s.get("prefill_beside_decode")) for s in drawn)
    alone = sum(s.get("prefills_per_iteration") is not None for s in drawn)
    assert (beside, min(alone, 1), min(len(drawn) - beside - alone, 1)) == (8, 1, 1)
