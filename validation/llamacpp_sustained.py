"""Does the host run slower under sustained load than in the profile's short probes?

``PYTHONPATH=src python validation/llamacpp_sustained.py [--json OUT]`` starts the llama.cpp
matrix's default server (``-np 4 -c 4096 -t 2``) and times one lone request at a time
(32 fresh prompt tokens, 64 outputs: its median chunk gap, the speed gate's step) in three
phases: ``GAPPED`` requests each after ``GAP_S`` of idle, then ``SUSTAINED_S`` of requests
back to back, then the gapped ones again. Same shape every time, so a difference between
the phases, or a drift inside the sustained one, is the host, not the engine. It prints
each phase's median step, and the sustained phase's first and last 10 requests.

Why (``docs/VALIDATION-llamacpp.md`` item 12): on the AMD EPYC VM, with the profile and the
runs gated to one speed of the lone reference, ``-np 4`` short's load runs took their
steps 10-15 % slower than the probe fit, though the reference read the same speed before
and after each run. A host that lets short bursts run quicker than minutes of load (a
vCPU's share, a boost clock) would do that; the probes are short bursts.

``--probe prompt`` (item 27) times a compute-bound step instead: a lone prompt of
``PROMPT_TOKENS`` fresh tokens and one output, by the server's own ``timings.prompt_ms``
(no HTTP path or client in it), the sustained phase then back-to-back prompts. The lone
decode is memory-bound; at the busy loads of ``-np 2 -b 64`` long its 63-token chunks
(prompt steps of 17-64 tokens) ran at 1.17-1.18 x Table 1's charge while its decode-only
steps ran at 0.94-1.03 (``steps_vs_charge`` in the published matrix JSON).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import speed_gate
from llamacpp_points import CONFIGS

from lyra_simpy.live import llamacpp

FLAGS = CONFIGS["default"]
"""The matrix's default configuration (per-slot KV, checkpoints, 2 threads)."""
GAPPED = 10
"""Requests in each gapped phase."""
GAP_S = 3.0
"""Idle before each gapped request."""
SUSTAINED_S = 60.0
"""How long the back-to-back phase runs."""
PROMPT_TOKENS = 64
"""``--probe prompt``: the lone prompt's fresh tokens (random ids, ``cache_prompt: false``;
with the default server's context checkpoints, two engine steps: 60 and 4 tokens)."""
_RNG = np.random.default_rng(3)


def step(url: str) -> float | None:
    """One lone request's median chunk gap (ms; None when it failed): the speed gate's
    probe with 64 outputs."""
    return speed_gate.lone_decode_step(url, {"cache_prompt": False}, 64)


def prompt_step(url: str) -> float | None:
    """One lone prompt's engine time (ms; None when it failed): ``PROMPT_TOKENS`` fresh
    tokens, one output (:func:`speed_gate.lone_prompt_ms`)."""
    return speed_gate.lone_prompt_ms(url, _RNG.integers(1000, 200000, size=PROMPT_TOKENS).tolist())


PROBES = {"decode": step, "prompt": prompt_step}
"""``--probe``: what each phase times."""


def phases(url: str, probe: str = "decode") -> dict[str, list[float]]:
    """The steps of each phase, in order (*probe*: a key of :data:`PROBES`)."""
    timed = PROBES[probe]
    out: dict[str, list[float]] = {"gapped_before": [], "sustained": [], "gapped_after": []}
    for _ in range(GAPPED):
        time.sleep(GAP_S)
        if (ms := timed(url)) is not None:
            out["gapped_before"].append(ms)
    end = time.monotonic() + SUSTAINED_S
    while time.monotonic() < end:
        if (ms := timed(url)) is not None:
            out["sustained"].append(ms)
    for _ in range(GAPPED):
        time.sleep(GAP_S)
        if (ms := timed(url)) is not None:
            out["gapped_after"].append(ms)
    return out


def summary(found: dict[str, list[float]]) -> dict[str, float]:
    med = {k: round(statistics.median(v), 2) for k, v in found.items()}
    sus = found["sustained"]
    med["sustained_first10"] = round(statistics.median(sus[:10]), 2)
    med["sustained_last10"] = round(statistics.median(sus[-10:]), 2)
    return med


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="llamacpp_sustained.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--json", type=Path, default=None, metavar="OUT")
    parser.add_argument("--rounds", type=int, default=2, help="the three phases, this often")
    parser.add_argument("--probe", choices=list(PROBES), default="decode",
                        help="decode: a lone request's median chunk gap (default); prompt: "
                        "a lone prompt's timings.prompt_ms")  # fmt: skip
    args = parser.parse_args(argv)
    binary, model = llamacpp.server_binary(), llamacpp.model_file()
    rounds = []
    log = Path("results") / "llamacpp-sustained.log"
    log.parent.mkdir(exist_ok=True)
    with llamacpp.Server(binary, model, FLAGS, log) as srv:
        PROBES[args.probe](srv.url)  # warm-up
        for k in range(args.rounds):
            found = phases(srv.url, args.probe)
            rounds.append({"steps": found, "summary": summary(found)})
            print(f"round {k + 1}: {rounds[-1]['summary']}", flush=True)
    if args.json is not None:
        args.json.write_text(
            json.dumps({"flags": FLAGS, "probe": args.probe, "rounds": rounds}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
