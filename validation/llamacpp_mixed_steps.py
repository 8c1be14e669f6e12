"""A prompt beside decoders, step by step: what its decoders' streams show, beside the
server's own ``prompt_ms``.

``lyra-simpy profile``'s mixed probe times the probe's prompt by llama.cpp's
``timings.prompt_ms``; with context checkpoints (Gemma 3's sliding-window layers) the
prompt runs in two steps — all but its last 4 tokens, then those 4 with a checkpoint
copied — and one whole-prompt row cannot tell the fit what each costs
(``docs/VALIDATION-llamacpp.md`` item 13). This starts llama-server as a matrix point
does, runs *b* decoders (prompts of ``--ctx`` tokens, pinned to slots 0..b−1), sends a
probe of each ``--prompts`` size to slot *b* and prints, per round, the decoders' step
times (median over them, ms) from the one the probe arrived in to the first after its
first token, the steps the profiler now takes for the prompt
(:func:`lyra_simpy.live.prober.prompt_step_gaps`), their sum and the server's
``prompt_ms``. It also times making an HTTP client with a TLS context of its own and
with the shared one (:func:`lyra_simpy.live.client.shared_tls`): the profiler made one
per probe request before.

``--alone`` also times each prompt with nothing else running, in the same round (the
server's ``prompt_ms``): does a prompt cost more beside running requests than alone
(item 24)? ``--trace`` starts the server at trace verbosity (``-lv 5``) and reads its log
(:func:`traced`): each context checkpoint's size and copy time
(``server_context::create_checkpoint``, made before the step's ``llama_decode``) and the
time ``init_sampler`` (a prompt's last step, which feeds every prompt token to the
sampler) logs for itself.

    PYTHONPATH=src python validation/llamacpp_mixed_steps.py [--flags "-np 4 -c 4096 -t 2"]
        [--decoders 3] [--ctx 40] [--prompts 16 64] [--rounds 4] [--alone] [--trace]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from lyra_simpy.live import llamacpp
from lyra_simpy.live.client import Outcome, new_client, send
from lyra_simpy.live.prober import prompt_step_gaps

EXTRA = {"cache_prompt": False}
STEPS = 2
"""A prompt's steps with context checkpoints, when it fits ``-b``: all but 4, then 4."""


def client_ms(shared: bool, n: int = 20) -> float:
    """Mean wall time to make one ``httpx.AsyncClient`` (ms): with the shared TLS context
    (*shared*, :func:`new_client`) or building its own (httpx's default)."""
    t0 = time.perf_counter()
    for _ in range(n):
        new_client() if shared else httpx.AsyncClient()
    return (time.perf_counter() - t0) / n * 1000.0


async def one(url: str, rng: np.random.Generator, n_in: int, n_out: int, t0: float,
              slot: int, first: asyncio.Event | None = None) -> Outcome:  # fmt: skip
    client = new_client()
    ids = [int(x) for x in rng.integers(1000, 30000, size=n_in)]
    try:
        out = await send(client, url, "openai", ids, n_out, 120.0, t0,
                         {**EXTRA, "id_slot": slot}, first)  # fmt: skip
    finally:
        await client.aclose()
    if out.error is not None:
        raise SystemExit(f"request failed: {out.error}")
    return out


async def trial(url: str, rng: np.random.Generator, b: int, ctx: int, prompt: int
                ) -> dict[str, Any]:  # fmt: skip
    """One probe of *prompt* tokens beside *b* decoders: the decoders' steps around it."""
    t0 = time.perf_counter()
    firsts = [asyncio.Event() for _ in range(b)]
    decoders = [asyncio.create_task(one(url, rng, ctx, 48, t0, k, firsts[k])) for k in range(b)]
    await asyncio.gather(*(e.wait() for e in firsts))
    await asyncio.sleep(0.15)
    probe = await one(url, rng, prompt, 1, t0, b)
    outs = await asyncio.gather(*decoders)
    first = probe.chunk_s[0]
    chunks = np.median([np.asarray(o.chunk_s) for o in outs], axis=0)
    gaps = np.diff(chunks) * 1000.0
    ends = chunks[1:]
    half_step_s = 0.5 * float(np.median(gaps)) / 1000.0
    around = [float(g) for g, e in zip(gaps, ends, strict=True)
              if probe.sent_s < e < first + half_step_s]  # fmt: skip
    before = gaps[ends <= probe.sent_s]
    assert probe.timings is not None
    return {
        "decode_ms": float(np.median(before[-6:])),
        "around_ms": around,
        "steps_ms": prompt_step_gaps(outs, first, STEPS),
        "prompt_ms": float(probe.timings["prompt_ms"]),
    }


async def alone_ms(url: str, rng: np.random.Generator, prompt: int) -> float:
    """The server's ``prompt_ms`` for *prompt* tokens with nothing else running."""
    await asyncio.sleep(0.3)
    probe = await one(url, rng, prompt, 1, time.perf_counter(), 0)
    assert probe.timings is not None
    return float(probe.timings["prompt_ms"])


async def measure(url: str, b: int, ctx: int, prompts: list[int], rounds: int,
                  alone: bool = False) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    rng = np.random.default_rng(7)
    await trial(url, rng, b, ctx, prompts[0])  # warm-up
    got: dict[str, list[dict[str, Any]]] = {str(p): [] for p in prompts}
    for _ in range(rounds):
        for p in prompts:
            t = await trial(url, rng, b, ctx, p)
            if alone:
                t["alone_prompt_ms"] = await alone_ms(url, rng, p)
            got[str(p)].append(t)
    return got


_STAMP = r"^(\d+)\.(\d+)\.(\d+)\.(\d+) "
"""llama.cpp's log prefix: minutes.seconds.milliseconds.microseconds since start."""


_CREATED = r"created context checkpoint .*n_tokens = (\d+), size = ([\d.]+)"
"""A checkpoint's ``created`` line: its tokens and its size in MiB."""


def _at_s(line: str) -> float:
    m = re.match(_STAMP, line)
    assert m is not None, line
    return 60 * int(m[1]) + int(m[2]) + int(m[3]) / 1e3 + int(m[4]) / 1e6


def traced(log: str) -> dict[str, list[dict[str, float]]]:
    """From a trace-verbosity llama-server log: each context checkpoint (``checkpoints``:
    its tokens, size in MiB and the time from the server's decision to make it,
    ``main/do_checkpoint = yes``, to its ``created`` line: the copy, ms) and each
    ``init_sampler`` (``samplers``: the prompt's tokens and the time it logs, ms)."""
    checkpoints: list[dict[str, float]] = []
    samplers: list[dict[str, float]] = []
    decided: dict[str, float] = {}
    for line in log.splitlines():
        if not re.match(_STAMP, line) or (task := re.search(r"\| task (\d+) \|", line)) is None:
            continue
        if "main/do_checkpoint = yes" in line:
            decided[task[1]] = _at_s(line)
        elif c := re.search(_CREATED, line):
            if task[1] in decided:
                copy_ms = 1000.0 * (_at_s(line) - decided.pop(task[1]))
                checkpoints.append({"tokens": int(c[1]), "mib": float(c[2]), "copy_ms": copy_ms})
        elif m := re.search(r"init sampler, took ([\d.]+) ms, tokens: text = (\d+)", line):
            samplers.append({"prompt": int(m[2]), "ms": float(m[1])})
    return {"checkpoints": checkpoints, "samplers": samplers}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flags", default="-np 4 -c 4096 -t 2")
    ap.add_argument("--decoders", type=int, default=3)
    ap.add_argument("--ctx", type=int, default=40, help="the decoders' prompt (default 40)")
    ap.add_argument("--prompts", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--alone", action="store_true",
                    help="also time each prompt alone, in the same round")  # fmt: skip
    ap.add_argument("--trace", action="store_true",
                    help="trace verbosity: checkpoint sizes, copy times from the log")  # fmt: skip
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    own, shared = client_ms(False), client_ms(True)
    print(f"an HTTP client: {own:.1f} ms with a TLS context of its own, {shared:.2f} ms "
          "with the shared one")  # fmt: skip
    log = Path(tempfile.mkdtemp()) / "llama-server.log"
    flags = args.flags.split() + (["-lv", "5"] if args.trace else [])
    with llamacpp.Server(llamacpp.server_binary(), llamacpp.model_file(), flags, log) as srv:
        got = asyncio.run(measure(srv.url, args.decoders, args.ctx, args.prompts, args.rounds,
                                  args.alone))  # fmt: skip
    print(f"\n{args.flags}: a prompt beside {args.decoders} decoders of {args.ctx} tokens; "
          "the decoders' steps (ms) from the probe's arrival to its first token")  # fmt: skip
    for p, trials in got.items():
        for t in trials:
            steps = " + ".join(f"{ms:.1f}" for ms in t["steps_ms"])
            print(f"  prompt {p:>4}: decode {t['decode_ms']:5.1f}; around "
                  f"{[round(x, 1) for x in t['around_ms']]}; its steps {steps} = "
                  f"{sum(t['steps_ms']):6.1f}; prompt_ms {t['prompt_ms']:6.1f}")  # fmt: skip
        first = statistics.median(t["steps_ms"][0] for t in trials)
        last = statistics.median(t["steps_ms"][-1] for t in trials)
        whole = statistics.median(t["prompt_ms"] for t in trials)
        print(f"  prompt {p:>4}: median first step {first:.1f}, last {last:.1f}, "
              f"prompt_ms {whole:.1f}")  # fmt: skip
        if args.alone:
            alone = [t["alone_prompt_ms"] for t in trials]
            print(f"  prompt {p:>4}: alone, prompt_ms {[round(x, 1) for x in alone]}, median "
                  f"{statistics.median(alone):.1f} (beside: {whole:.1f})")  # fmt: skip
    trace = traced(log.read_text()) if args.trace else {"checkpoints": [], "samplers": []}
    for c in trace["checkpoints"]:
        print(f"  context checkpoint of {c['tokens']:>4} tokens: {c['mib']:6.3f} MiB, "
              f"copied in {c['copy_ms']:.2f} ms")  # fmt: skip
    for m in trace["samplers"]:
        print(f"  init_sampler over a prompt of {m['prompt']:>4} tokens: {m['ms']:.2f} ms")
    if args.json:
        doc = {"flags": args.flags, "decoders": args.decoders, "ctx": args.ctx,
               "client_ms": {"own_tls": own, "shared_tls": shared}, "trials": got,
               **trace}  # fmt: skip
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
