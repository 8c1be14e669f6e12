"""Where llama-server puts a request's KV cells under load, read from its own log.

With ``-kvu`` every slot shares one KV buffer, and what a prompt token's attention spans
(``n_kv``: the highest used cell plus one, padded to 256) and which 64-cell tiles its
flash attention computes depend on where the cells lie, not only on how many are used.
``llama_kv_cache::find_slot`` (``src/llama-kv-cache.cpp``) places a ubatch's tokens one
by one in the free cells from the cache's ``head`` on, wrapping, and starts from cell 0
only when ``head`` is more than ``used + 2 × n_tokens``; ``apply_ubatch`` moves ``head``
past the last cell placed; ``seq_rm`` moves it back to the lowest cell it frees. So a
decode step's tokens interleave, and a new prompt fills the holes its slot's last
request left.

This starts llama-server as a matrix point does, with ``LLAMA_KV_CACHE_DEBUG=2`` (the
cache logs ``n`` = used_max_p1, ``used`` and ``head`` at every ``find_slot``, and the
sliding-window cache its whole cell map), runs a closed loop of ``--clients`` clients
with the long regime's lengths, and prints per cache: how far the used cells' end lies
beyond the used count (``n`` against ``used``, padded as ``get_n_kv`` pads), and, from
the cell maps, how many 64-cell tiles a sequence's cells spread over against the fewest
that hold them; then the same from the engine model (``kv_layout: placed``,
:class:`~lyra_simpy.policies.kvcells.KvCells`) on a simulated closed loop of that shape
(``model``).

    PYTHONPATH=src python validation/llamacpp_cells.py [--flags "-np 4 -c 4096 -t 2 -kvu"]
        [--clients 4] [--requests 24] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from lyra_simpy.live import llamacpp
from lyra_simpy.live.client import new_client, send

PAD = 256
TILE = 64
_SLOT = re.compile(
    r"find_slot: stream\[(\d+)\], n = +(\d+), used = +(\d+), head = +(\d+), "
    r"size = +(\d+), n_swa = +(\d+)"
)


def _pad(n: int) -> int:
    return max(PAD, -(-n // PAD) * PAD)


async def closed_loop(url: str, clients: int, requests: int, seed: int) -> list[float]:
    """*clients* clients, each sending its next request when the last one ends, until
    *requests* are sent; prompts of 200-400 tokens, outputs of 80-120 (the matrix's long
    regime). Returns each request's end-to-end time (s)."""
    rng = np.random.default_rng(seed)
    todo = [(int(rng.integers(200, 401)), int(rng.integers(80, 121))) for _ in range(requests)]
    done: list[float] = []
    t0 = time.perf_counter()

    async def worker() -> None:
        client = new_client()
        try:
            while todo:
                n_in, n_out = todo.pop()
                ids = [int(x) for x in rng.integers(1000, 30000, size=n_in)]
                out = await send(client, url, "openai", ids, n_out, 300.0, t0,
                                 {"cache_prompt": False})  # fmt: skip
                if out.error is not None:
                    raise SystemExit(f"request failed: {out.error}")
                done.append(out.chunk_s[-1] - out.sent_s)
        finally:
            await client.aclose()

    await asyncio.gather(*(worker() for _ in range(clients)))
    return done


def cell_maps(log: str) -> list[tuple[dict[str, int], list[str]]]:
    """Each ``find_slot`` of the log: its numbers, and the cell map that follows it (one
    character a cell: ``.`` empty, a digit the sequence; empty without one). The cache
    logs its numbers once per sequence in the ubatch: repeats in a row count once."""
    lines = log.splitlines()
    got: list[tuple[dict[str, int], list[str]]] = []
    for k, line in enumerate(lines):
        m = _SLOT.search(line)
        if m is None:
            continue
        nums = dict(zip(("stream", "n", "used", "head", "size", "n_swa"), map(int, m.groups()),
                        strict=True))  # fmt: skip
        if got and got[-1][0] == nums:  # (one line per sequence in the ubatch: one ubatch)
            continue
        cells: list[str] = []
        for nxt in lines[k + 1 : k + 2 + nums["size"] // 256]:
            if "find_slot" in nxt:  # (only a sliding-window cache prints its map)
                break
            if nxt.rstrip().endswith("*"):
                cells.append(re.sub(r"[^.0-9M]", "", nxt.rsplit("*", 1)[0].split()[-1]))
            elif cells:
                break
        got.append((nums, cells))
    return got


def spread(cells: str) -> dict[str, float]:
    """Per sequence in a cell map: the 64-cell tiles its cells touch against the fewest
    that could hold them."""
    arr = np.frombuffer(cells.encode(), dtype=np.uint8)
    out: dict[str, float] = {}
    for seq in sorted({c for c in cells if c.isdigit()}):
        idx = np.flatnonzero(arr == ord(seq))
        out[seq] = len(np.unique(idx // TILE)) / -(-len(idx) // TILE)
    return out


def summarise(found: list[tuple[dict[str, int], list[str]]]) -> dict[str, Any]:
    by_cache: dict[int, dict[str, list[float]]] = {}
    for nums, maps in found:
        cache = by_cache.setdefault(nums["size"], {"n_kv_ratio": [], "n_kv_extra": [],
                                                   "tile_spread": []})  # fmt: skip
        if nums["used"] == 0:
            continue
        real, packed = _pad(nums["n"]), _pad(nums["used"])
        cache["n_kv_ratio"].append(real / packed)
        cache["n_kv_extra"].append(real - packed)
        if maps:
            cache["tile_spread"] += list(spread("".join(maps)).values())
    out: dict[str, Any] = {}
    for size, got in by_cache.items():
        r, e, t = got["n_kv_ratio"], got["n_kv_extra"], got["tile_spread"]
        out[str(size)] = {
            "find_slots": len(r),
            "n_kv_ratio_median": statistics.median(r) if r else None,
            "n_kv_ratio_p90": float(np.percentile(r, 90)) if r else None,
            "n_kv_extra_cells_median": statistics.median(e) if e else None,
            "share_beyond_packed": sum(x > 1.0 for x in r) / len(r) if r else None,
            "tile_spread_median": statistics.median(t) if t else None,
            "tile_spread_p90": float(np.percentile(t, 90)) if t else None,
        }
    return out


def modelled(flags: str, clients: int, requests: int, seed: int) -> dict[str, Any]:
    """The same summary from the ``llamacpp`` engine model (``kv_layout: placed``) on a
    simulated closed loop of the same shape: every cell map before a ubatch is placed, as
    the server logs it before ``find_slot`` (the simulated requests are drawn alike, not
    the same ones)."""
    from unittest import mock

    from lyra_simpy.policies.kvcells import KvCells
    from lyra_simpy.scenario import scenario_from_dict
    from lyra_simpy.simulation import simulate

    found: list[tuple[dict[str, int], list[str]]] = []
    place = KvCells.place

    def spy(self: KvCells, seqs: Any, positions: Any) -> Any:
        nums = {"size": self.size, "n": self.used_max_p1(), "used": self.used}
        cells = "".join("." if s < 0 else str(s) for s in self.seq)
        found.append((nums, [cells] if self.n_swa else []))
        return place(self, seqs, positions)

    raw = {
        "name": "cells", "seed": seed,
        "engine": {"name": "llamacpp", "command": "llama-server " + flags},
        "workload": {
            "num_requests": requests,
            "arrival": {"name": "closed_loop", "concurrency": clients, "think_time_s": 0.005},
            "input_tokens": {"name": "uniform", "low": 200, "high": 400},
            "output_tokens": {"name": "uniform", "low": 80, "high": 120},
        },
        # Gemma 3: sliding-window layers; the replay sends cache_prompt: false
        "scheduler": {"name": "llamacpp", "sliding_window": True, "cache_prompt": False},
        "cost": {"name": "linear", "base_ms": 5.0, "per_seq_ms": 8.0,
                 "per_prefill_token_ms": 1.0},
    }  # fmt: skip
    with mock.patch.object(KvCells, "place", spy):
        simulate(scenario_from_dict(raw))
    return summarise(found)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flags", default="-np 4 -c 4096 -t 2 -kvu")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    log = Path(tempfile.mkdtemp()) / "llama-server.log"
    flags = [*args.flags.split(), "-lv", "5"]
    os.environ["LLAMA_KV_CACHE_DEBUG"] = "2"  # the server inherits it
    with llamacpp.Server(llamacpp.server_binary(), llamacpp.model_file(), flags, log) as srv:
        e2e = asyncio.run(closed_loop(srv.url, args.clients, args.requests, args.seed))
    found = cell_maps(log.read_text(errors="replace"))
    doc = {
        "flags": args.flags,
        "clients": args.clients,
        "requests": len(e2e),
        "caches": summarise(found),
        "model": modelled(args.flags, args.clients, args.requests, args.seed),
    }
    print(json.dumps(doc, indent=1))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
