"""Decode steps of two sequences as a profile probes them, and as load runs meet them.

`-np 2 -b 64` long's real decode steps ran 1.05-1.10x its probe fit while the host held
still (docs/VALIDATION-llamacpp.md, item 10). The probe (``lyra-simpy profile``'s
``decode_batch``) sends its requests together: both prompts are in the same steps,
both sequences sit at the same context and decode in lock step. A load run's pairs do
not. This starts llama-server as the matrix point does and times a two-sequence decode
step (the median gap between one request's streamed tokens while both decode, nothing
else in the step) in cases that differ from the probe by one thing each:

- ``probe``: two requests of *ctx* prompt tokens sent together (what the probe does);
- ``unequal``: sent together, prompts of ctx/2 and 3ctx/2 tokens (same total);
- ``staggered``: the second sent 0.6 s (~24 lone steps) after the first's first token;
- ``queued``: as ``probe``, with four more requests waiting for a slot;
- ``lone``: one request alone (batch 1, for scale).

Cases run round-robin, ``--repeats`` times each (median of medians printed, and the
spread). ``--json FILE`` keeps every measurement.

    PYTHONPATH=src python validation/llamacpp_decode_pairs.py [--flags "-np 2 -c 4096 -t 2 -b 64"]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from lyra_simpy.live import llamacpp
from lyra_simpy.live.client import Outcome, new_client, send

EXTRA = {"cache_prompt": False}
"""What the matrix's replays send (a load run's prompts are never cached)."""

RNG = np.random.default_rng()

STAGGER_S = 0.6
"""``staggered``: the second request is sent this long after the first one's first token
(about 24 steps of a lone decode here; the first streams 48 tokens more than the second,
so the two overlap by the second's whole output)."""
PAUSE_S = 0.5
"""Idle time between two cases (the server's last stream closes)."""


def prompt(n: int) -> list[int]:
    return RNG.integers(1000, 30000, size=n).tolist()


async def one(url: str, n_in: int, n_out: int, t0: float,
              first: asyncio.Event | None = None) -> Outcome:  # fmt: skip
    async with new_client() as client:
        out = await send(client, url, "openai", prompt(n_in), n_out, 300.0, t0, EXTRA, first)
    if out.error is not None:
        raise SystemExit(f"decode_pairs: request ({n_in} in, {n_out} out) failed: {out.error}")
    return out


def pair_gaps(a: Outcome, b: Outcome) -> list[float]:
    """*a*'s gaps (ms) while both decode: after the second first token, before either ends."""
    opens = max(a.chunk_s[0], b.chunk_s[0])
    closes = min(a.chunk_s[-1], b.chunk_s[-1])
    ts = [t for t in a.chunk_s if opens < t <= closes]
    return [1000.0 * (y - x) for x, y in itertools.pairwise(ts)]


async def case(url: str, name: str, ctx: int, n_out: int) -> float:
    t0 = time.perf_counter()
    if name == "lone":
        out = await one(url, ctx, n_out, t0)
        gaps = [1000.0 * (y - x) for x, y in itertools.pairwise(out.chunk_s[1:])]
        return statistics.median(gaps)
    if name == "staggered":
        first = asyncio.Event()
        a_task = asyncio.create_task(one(url, ctx, n_out + 48, t0, first))
        await first.wait()
        await asyncio.sleep(STAGGER_S)
        b = await one(url, ctx, n_out, t0)
        a = await a_task
        return statistics.median(pair_gaps(a, b)[1:])
    sizes = (ctx // 2, 3 * ctx // 2) if name == "unequal" else (ctx, ctx)
    tasks = [asyncio.create_task(one(url, n, n_out, t0)) for n in sizes]
    waiting = []
    if name == "queued":
        await asyncio.sleep(0.05)
        waiting = [asyncio.create_task(one(url, ctx, 8, t0)) for _ in range(4)]
    a, b = await asyncio.gather(*tasks)
    await asyncio.gather(*waiting)
    return statistics.median(pair_gaps(a, b))


CASES = ("probe", "unequal", "staggered", "queued", "lone")


async def measure(url: str, ctx: int, n_out: int, repeats: int) -> dict[str, list[float]]:
    got: dict[str, list[float]] = {c: [] for c in CASES}
    for k in range(repeats):
        for c in CASES:
            got[c].append(round(await case(url, c, ctx, n_out), 2))
            await asyncio.sleep(PAUSE_S)
        print(f"round {k + 1}: " + ", ".join(f"{c} {got[c][-1]}" for c in CASES), flush=True)
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flags", default="-np 2 -c 4096 -t 2 -b 64")
    ap.add_argument("--ctx", type=int, default=300, help="prompt tokens (default 300)")
    ap.add_argument("--out", type=int, default=64, help="output tokens (default 64)")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    flags = args.flags.split()
    log = Path(tempfile.mkdtemp()) / "llama-server.log"
    with llamacpp.Server(llamacpp.server_binary(), llamacpp.model_file(), flags, log) as srv:
        got = asyncio.run(measure(srv.url, args.ctx, args.out, args.repeats))
    print(f"\n{args.flags}, prompts {args.ctx}, outputs {args.out}: step (ms), median of "
          f"{args.repeats} [min-max]")  # fmt: skip
    ref = statistics.median(got["probe"])
    for c in CASES:
        m = statistics.median(got[c])
        print(f"  {c:10s} {m:6.2f} [{min(got[c]):.2f}-{max(got[c]):.2f}]  {m / ref:.3f}x probe")
    if args.json:
        doc: dict[str, Any] = {"flags": args.flags, "ctx": args.ctx, "out": args.out, **got}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
