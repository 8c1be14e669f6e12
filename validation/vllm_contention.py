"""Does work for the API server, with no work for the engine, slow vLLM's steps here?

``python validation/vllm_contention.py [--rounds 4]`` starts the default server of
``validate_vllm_cpu.py`` and measures one decode step of 4 requests decoding in
lock-step (64-token prompts, 40 output tokens each; the median gap between streamed
tokens, as the profile's decode probe takes it) three ways, alternated, ``--rounds``
times:

* ``alone``: nothing else is sent;
* ``api``: another client keeps sending ``GET /v1/models``, one after the other, each
  on a new connection, as the replay opens one per request: work for the API server and
  the client, none for the engine;
* ``short``: another client keeps sending one-token completions of 16 prompt tokens:
  what a replay's arrivals add (their prompts enter the engine's steps too).

vLLM pins its worker to core 0 and leaves the API server, the engine core's busy loop
and the client to share core 1 on this 2-core machine; a real run's arrivals load that
core where a profile's probes do not. Needs the cached vLLM environment and tiny model
that ``tox -e validate-vllm-cpu`` builds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vllm_points as matrix

from lyra_simpy.live import vllm_cpu
from lyra_simpy.live.client import median_gap_ms, new_client, send

IDS = np.random.default_rng()
"""Fresh prompt ids each process: nothing the prefix cache could hold."""


async def _step_ms(url: str, batch: int = 4) -> float:
    """The decode step of *batch* requests sent together (64-token prompts, 40 output
    tokens each): the median gap between streamed tokens, as ``lyra-simpy profile``'s
    decode probe takes it (:func:`~lyra_simpy.live.client.median_gap_ms`)."""
    extra = {"model": vllm_cpu.SERVED_NAME}
    async with new_client() as client:
        t0 = time.perf_counter()
        outs = await asyncio.gather(
            *(send(client, url, "openai", IDS.integers(1000, 30000, 64).tolist(), 40, 60.0,
                   t0, extra) for _ in range(batch))
        )  # fmt: skip
    return median_gap_ms(outs)


def _load(url: str, kind: str, stop: threading.Event) -> None:
    """Keep the API server busy until *stop*: ``api`` or ``short`` (module docstring)."""
    while not stop.is_set():
        try:
            if kind == "api":
                httpx.get(url + "/v1/models", timeout=5.0)
            else:
                body = {"model": vllm_cpu.SERVED_NAME, "max_tokens": 1,
                        "prompt": IDS.integers(1000, 30000, 16).tolist()}  # fmt: skip
                httpx.post(url + "/v1/completions", json=body, timeout=10.0)
        except httpx.HTTPError:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm_contention.py")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    python = vllm_cpu.env_python()
    model = vllm_cpu.tiny_model(python)
    flags = matrix.launch_flags("default")
    log = matrix.OUT / "vllm-contention.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    got: dict[str, list[float]] = {"alone": [], "api": [], "short": []}
    with vllm_cpu.Server(python, model, flags, log, matrix.KV_SPACE_GIB) as srv:
        url = srv.url.rstrip("/")
        asyncio.run(_step_ms(url))  # warm-up
        for _ in range(args.rounds):
            for kind, steps in got.items():
                stop = threading.Event()
                other = None
                if kind != "alone":
                    other = threading.Thread(target=_load, args=(url, kind, stop))
                    other.start()
                    time.sleep(0.3)
                steps.append(asyncio.run(_step_ms(url)))
                stop.set()
                if other is not None:
                    other.join()
                time.sleep(1.0)
    for kind, steps in got.items():
        print(f"{kind:>5}: 4-way decode step {statistics.median(steps):.1f} ms "
              f"(rounds: {', '.join(f'{s:.1f}' for s in steps)})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
