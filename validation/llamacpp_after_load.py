"""Is a llama-server slower when requests queue, or just after a burst of load?

``docs/VALIDATION-llamacpp.md`` item 14: in the AMD host's matrix, ``-np 2 -b 64``'s
loads that keep both slots busy (Poisson 0.9, closed loops of 4 and 8) ran their decode
steps 1.09–1.23 × the probe fit, and the speed gate's lone request right after those
runs read 1.11–1.19 × the speed the runs were gated on; ``-np 4``'s points read it
0.85–1.15 ×, below 1 after 15 of their 20 loads. Two server-side causes would do that,
and this tries each on a fresh server per configuration, nothing else running:

- *queued*: the running requests' decode step (median chunk gap while all of them
  decode; 32-token prompts, 64 outputs, one per slot) alone, then with 2 and with 6
  more requests sent at the same time and waiting in the server's queue;
- *after*: the speed gate's lone request (:func:`llamacpp_sustained.step`) 3 times,
  then ``BURST_S`` of ``BURST_CLIENTS`` closed-loop clients sending prompts of 200–400
  tokens for 100 outputs (the long regime's shape), then the lone request 6 times at
  once and 3 more after ``LATER_S`` idle.

::

    PYTHONPATH=src python validation/llamacpp_after_load.py [--flags "-np 2 -c 4096 -t 2
        -b 64" "-np 4 -c 4096 -t 2"] [--rounds 5]

Prints one line per configuration and test (ms). A cause would show as a step that
grows with the queue, or an *after* clearly above *before* at ``-np 2`` and not at
``-np 4``; the host's own noise moves these 10–20 % between minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llamacpp_mixed_steps import one
from llamacpp_sustained import step

from lyra_simpy.live import llamacpp
from lyra_simpy.live.client import Outcome

ANY_SLOT = -1
"""llama.cpp's ``id_slot`` for "the server picks" (``server_context::get_available_slot``)."""
QUEUED = (0, 2, 6)
"""Requests sent beside one per slot, left waiting in the server's queue."""
BURST_S = 40.0
BURST_CLIENTS = 4
LATER_S = 5.0


async def decode_step(url: str, rng: np.random.Generator, slots: int, queued: int) -> float:
    """The median chunk gap of the *slots* requests served first, while all of them
    decode, with *queued* more sent at the same time."""
    t0 = time.perf_counter()
    outs: list[Outcome] = await asyncio.gather(
        *(one(url, rng, 32, 64, t0, ANY_SLOT) for _ in range(slots + queued))
    )
    first = sorted(outs, key=lambda o: o.chunk_s[0])[:slots]
    lo, hi = max(o.chunk_s[0] for o in first), min(o.chunk_s[-1] for o in first)
    gaps: list[float] = []
    for o in first:
        c = np.asarray(o.chunk_s)
        gaps += list(np.diff(c[(c > lo) & (c <= hi)]) * 1000.0)
    return float(np.median(gaps))


async def closed_loop(url: str, rng: np.random.Generator, clients: int, seconds: float,
                      pin: bool = False) -> list[Outcome]:  # fmt: skip
    """*clients* closed-loop clients for *seconds*, each sending the long regime's shape
    (200-400 fresh prompt tokens, 100 outputs) back to back, client k in slot k when
    *pin* (else the server picks); every request's outcome."""
    t0 = time.perf_counter()
    end = t0 + seconds
    outs: list[Outcome] = []

    async def client(k: int) -> None:
        while time.perf_counter() < end:
            n_in = int(rng.integers(200, 401))
            outs.append(await one(url, rng, n_in, 100, t0, k if pin else ANY_SLOT))

    await asyncio.gather(*(client(k) for k in range(clients)))
    return outs


def lone(url: str, n: int) -> list[float]:
    """*n* readings of :func:`llamacpp_sustained.step` (the speed gate's lone request with
    64 outputs), rounded; failed ones left out."""
    steps = [step(url) for _ in range(n)]
    return [round(s, 1) for s in steps if s is not None]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flags", nargs="+", default=["-np 2 -c 4096 -t 2 -b 64",
                                                   "-np 4 -c 4096 -t 2"])  # fmt: skip
    ap.add_argument("--rounds", type=int, default=5, help="queued: trials of each (default 5)")
    args = ap.parse_args(argv)
    for flags in args.flags:
        f = flags.split()
        slots = int(f[f.index("-np") + 1]) if "-np" in f else 1
        log = Path(tempfile.mkdtemp()) / "llama-server.log"
        rng = np.random.default_rng(3)
        with llamacpp.Server(llamacpp.server_binary(), llamacpp.model_file(), f, log) as srv:
            asyncio.run(decode_step(srv.url, rng, slots, 0))  # warm-up
            got: dict[int, list[float]] = {q: [] for q in QUEUED}
            for _ in range(args.rounds):
                for q in QUEUED:
                    got[q].append(round(asyncio.run(decode_step(srv.url, rng, slots, q)), 1))
            cells = "; ".join(f"+{q} queued {statistics.median(v):.1f} {v}"
                              for q, v in got.items())  # fmt: skip
            print(f"{flags}: decode step of {slots} running (ms): {cells}", flush=True)
            for k in range(2):
                before = lone(srv.url, 3)
                asyncio.run(closed_loop(srv.url, rng, BURST_CLIENTS, BURST_S))
                after = lone(srv.url, 6)
                time.sleep(LATER_S)
                later = lone(srv.url, 3)
                print(f"{flags}: lone request, round {k + 1} (ms): before {before}, right "
                      f"after {BURST_S:.0f} s of {BURST_CLIENTS} clients {after}, "
                      f"{LATER_S:.0f} s later {later}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
