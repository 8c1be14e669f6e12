"""What placing ``-kvu``'s KV cells costs the simulator (``scheduler.kv_layout``).

The ``llamacpp`` scheduler with ``kv_layout: placed`` keeps every cell of ``-kvu``'s
buffer as llama.cpp places it (:mod:`lyra_simpy.policies.kvcells`) and counts each
prompt's attention on it; ``packed`` counts it in closed form. This times both, in one
run, on the same scenario: 2 000 requests of 200-400 prompt and 80-120 output tokens at
4 req/s on ``llama-server -np 8 -c 16384 -kvu`` (Gemma 3's sliding-window cache too), a
linear cost model; it prints each wall time, the ratio and the engine iterations (the
same for both: the cost model does not read the cells).

    python benchmarks/llamacpp_layout.py [--requests N]
"""

from __future__ import annotations

import argparse
import time

from lyra_simpy import scenario_from_dict, simulate


def scenario(layout: str, requests: int) -> dict:
    return {
        "name": f"kvu_{layout}",
        "seed": 3,
        "engine": {"name": "llamacpp", "command": "llama-server -np 8 -c 16384 -t 2 -kvu"},
        "workload": {
            "num_requests": requests,
            "arrival": {"name": "poisson", "rate_per_s": 4.0},
            "input_tokens": {"name": "uniform", "low": 200, "high": 400},
            "output_tokens": {"name": "uniform", "low": 80, "high": 120},
        },
        "scheduler": {
            "name": "llamacpp",
            "sliding_window": True,
            "cache_prompt": False,
            "kv_layout": layout,
        },
        "cost": {"name": "linear", "base_ms": 5.0, "per_seq_ms": 8.0, "per_prefill_token_ms": 0.3},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    wall = {}
    for layout in ("packed", "placed"):
        t0 = time.perf_counter()
        res = simulate(scenario_from_dict(scenario(layout, args.requests)))
        wall[layout] = time.perf_counter() - t0
        print(f"{layout}: {wall[layout]:.2f} s, {res.engine['iterations']} iterations")
    print(f"placed / packed: {wall['placed'] / wall['packed']:.1f} x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
