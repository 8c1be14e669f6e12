"""What a request waits for before llama-server computes its prompt: the prompt cache's
save of the idle slots, on the main loop, at the request's launch.

With its defaults (``--cache-ram 8192``, ``--cache-idle-slots``) llama-server copies the
state of the slot a new request takes, and of every idle slot not yet saved, into host
RAM when it gives the request a slot (``tools/server/server-context.cpp``:
``get_available_slot`` → ``server_slot::prompt_save``; the log's ``selected slot`` line
comes before it, ``launch_slot_`` after). The engine's own ``prompt_ms`` starts after it,
and so do the profile's lone prefill probes' rows; the profile's request path
(``request_path_ms``: the lone probes' client TTFT less ``prompt_ms``) sees it only for
what a probe's slots held, a few dozen tokens. A request that comes after long requests
finished finds idle slots of hundreds of tokens each.

``python validation/llamacpp_launch_save.py [--flags "-np 4 -c 4096 -t 2 -kvu"] [--rounds
8] [--idle-s 3] [--json OUT]`` starts ``llama-server FLAGS`` (by default ``-kvu`` long's)
twice, as launched and with ``--cache-ram 0`` added. Each round sends four requests of 200-400
random prompt tokens and 100 outputs 0.3 s apart, waits for them, idles ``--idle-s``,
then sends one request of 327 prompt tokens and 81 outputs (``-kvu`` long's Poisson 0.3
request 4), and 0.5 s after it another; every request as ``lyra-simpy replay`` sends it
(:func:`rounds`). For each it prints the client's TTFT less the
engine's ``prompt_ms`` (median and every round) and the server log's time from
``selected slot`` to ``launch_slot_`` over all launches (percentiles).

``--points CFG_REGIME ...`` instead reads what ``validate_cpu.py --matrix`` left in
``results/validation-llamacpp`` (no server): each point's ``llama-server.log`` (profile,
speed probes and real runs) for the same selection-to-launch times, and, at ``--load``
(default Poisson 0.3), the real runs' lone requests (none other in flight when they were
sent; the first of each run apart): the median of their TTFT less the engine's
``prompt_ms``, and of their TTFT less Table 1's for the same request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from llamacpp_idle import sent_alone, slot_lines
from llamacpp_points import OUT, ROOT, point_key

from lyra_simpy.metrics.io import read_jsonl

FLAGS = ["-np", "4", "-c", "4096", "-t", "2", "-kvu"]
"""``-kvu`` long's server (``validate_cpu.py --matrix``'s ``kvu``)."""
PCTS = (50, 90, 95, 99)


def select_to_launch_ms(log: Path) -> list[float]:
    """Every launch in *log*: ms from the ``selected slot`` line to ``launch_slot_``."""
    out: list[float] = []
    selected = None
    for t, kind, _, text in slot_lines(log):
        if kind == "get_availabl" and "selected slot" in text:
            selected = t
        elif kind == "launch_slot_" and selected is not None:
            out.append(1e3 * (t - selected))
            selected = None
    return out


def lone_requests(point: Path, load: str) -> dict[str, Any]:
    """The real runs' lone requests at *load* (module docstring): how many, and the medians
    of TTFT less ``prompt_ms`` and less Table 1's TTFT (ms), each run's first request
    apart (after the speed probes)."""
    sim = {r["request_id"]: r for r in read_jsonl(point / "sim" / load / "base" / "requests.jsonl")}
    first, gap, over = [], [], []
    for run in sorted((point / "real" / load).glob("run*")):
        real = sorted(read_jsonl(run / "requests.jsonl"), key=lambda r: r["arrival_s"])
        for k, r in enumerate(real):
            if not sent_alone(real, k):
                continue
            g = r["ttft_ms"] - r["engine_timings"]["prompt_ms"]
            if k == 0:
                first.append(round(g, 1))
                continue
            gap.append(g)
            over.append(r["ttft_ms"] - sim[r["request_id"]]["ttft_ms"])
    return {"load": load, "lone": len(gap), "gap_median_ms": round(statistics.median(gap), 1),
            "over_table1_median_ms": round(statistics.median(over), 1),
            "first_gap_ms": first}  # fmt: skip


def percentiles(ms: list[float]) -> dict[str, Any]:
    """Launches and their percentiles :data:`PCTS` (ms, one decimal)."""
    got = np.percentile(ms, PCTS) if ms else [None] * len(PCTS)
    out: dict[str, Any] = {"launches": len(ms)}
    for p, v in zip(PCTS, got, strict=True):
        out[f"p{p}"] = None if v is None else round(float(v), 1)
    return out


def gap_ms(out: Any) -> float:
    """A request's TTFT less the engine's own ``prompt_ms`` (a :class:`Outcome`)."""
    if out.error or not out.chunk_s or not out.timings:
        raise SystemExit(f"llamacpp_launch_save: a request failed ({out.error or 'no timings'})")
    return 1e3 * (out.chunk_s[0] - out.sent_s) - float(out.timings["prompt_ms"])


async def rounds(url: str, rounds: int, idle_s: float) -> tuple[list[float], list[float]]:
    """The rounds on a server at *url*, each request as ``lyra-simpy replay`` sends it
    (:func:`lyra_simpy.live.client.send`: ``/v1/completions``, token ids, a connection of
    its own, ``cache_prompt: false`` as the matrix sends it): the gaps of the request
    after the idle, and of the one 0.5 s after it."""
    from lyra_simpy.live.client import new_client, send

    rng = np.random.default_rng(9)
    extra = {"cache_prompt": False}
    t0 = time.perf_counter()

    def request(tokens: int, outputs: int) -> Any:
        ids = rng.integers(1000, 20000, size=tokens).tolist()
        return send(client, url, "openai", ids, outputs, 300.0, t0, extra)

    after_idle, next_one = [], []
    async with new_client() as client:
        for _ in range(rounds):
            burst = []
            for n in rng.integers(200, 400, size=4):
                burst.append(asyncio.create_task(request(int(n), 100)))
                await asyncio.sleep(0.3)
            for out in await asyncio.gather(*burst):
                gap_ms(out)  # (fails on a failed request)
            await asyncio.sleep(idle_s)
            after_idle.append(round(gap_ms(await request(327, 81)), 1))
            await asyncio.sleep(0.5)
            next_one.append(round(gap_ms(await request(327, 81)), 1))
    return after_idle, next_one


def session(flags: list[str], n_rounds: int, idle_s: float, log: Path) -> dict[str, Any]:
    """One server: the gaps after the idle and 0.5 s later, and its log's launches."""
    from lyra_simpy.live import llamacpp

    with llamacpp.Server(llamacpp.server_binary(), llamacpp.model_file(), flags, log) as srv:
        after_idle, next_one = asyncio.run(rounds(srv.url, n_rounds, idle_s))
    return {"flags": " ".join(flags), "after_idle_ms": after_idle, "next_ms": next_one,
            "after_idle_median_ms": round(statistics.median(after_idle), 1),
            "next_median_ms": round(statistics.median(next_one), 1),
            "select_to_launch": percentiles(select_to_launch_ms(log))}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flags", default=" ".join(FLAGS), help="the server's flags")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--idle-s", type=float, default=3.0)
    ap.add_argument("--points", nargs="+", metavar="CFG_REGIME", default=None,
                    help="read the stored points' logs instead (e.g. kvu_long)")  # fmt: skip
    ap.add_argument("--load", default="poisson_0.3", help="with --points: the load read")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds: got {args.rounds}, must be 1 or more")
    if args.idle_s < 0:
        ap.error(f"--idle-s: got {args.idle_s:g}, must be 0 or more")
    got: dict[str, Any] = {}
    if args.points:
        logs = {name: OUT / name / "llama-server.log" for name in args.points}
        for name, log in logs.items():  # every point checked before any is read
            if not log.is_file():
                raise SystemExit(f"--points: {name}: no {log} (run validate_cpu.py --matrix)")
            sim = OUT / name / "sim" / args.load / "base" / "requests.jsonl"
            if not sim.is_file():
                raise SystemExit(
                    f"--points: {name}: no {sim}, Table 1's simulation of {args.load} (after "
                    "llamacpp_store.py unpack: validate_cpu.py --matrix --resimulate --only "
                    f"{point_key(name)})"
                )
        for name, log in logs.items():
            got[name] = {"select_to_launch": percentiles(select_to_launch_ms(log)),
                         "lone": lone_requests(OUT / name, args.load)}  # fmt: skip
            print(f"{name:15s} selected slot -> launch, ms: {got[name]['select_to_launch']}\n"
                  f"{'':15s} lone requests at {args.load}: {got[name]['lone']}")  # fmt: skip
    else:
        work = OUT / "launch_save"
        base = args.flags.split()
        for name, flags in (("defaults", base), ("cache_ram_0", [*base, "--cache-ram", "0"])):
            got[name] = s = session(flags, args.rounds, args.idle_s, work / f"{name}.log")
            print(f"{s['flags']}\n  first request after {args.idle_s:g} s idle, TTFT less "
                  f"prompt_ms: median {s['after_idle_median_ms']} ms {s['after_idle_ms']}\n"
                  f"  the next, 0.5 s later: median {s['next_median_ms']} ms {s['next_ms']}\n"
                  f"  selected slot -> launch, every launch: {s['select_to_launch']}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"argv": sys.argv[1:] if argv is None else argv,
                                         **got}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    raise SystemExit(main())
