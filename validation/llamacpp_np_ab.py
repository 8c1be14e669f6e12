"""Is two-way decode slower on a ``-np 2`` server than on a ``-np 4`` one, same host, same minute?

``docs/VALIDATION-llamacpp.md`` item 14: in the AMD host's matrix, ``-np 2 -b 64``'s loads
that keep both slots busy ran their two-sequence decode steps 1.09–1.23 × the probe fit
(30.5–32.3 ms against the profile's 27.8 at long), while ``-np 4``'s four-sequence steps
sat on theirs. Each point ran at another time of day, so the host and the server were
never told apart. This runs the same two-sequence load on each server in turn, round after
round, so the host's drift falls on every arm alike:

- ``np2_b64``: ``-np 2 -c 4096 -t 2 -b 64`` (the matrix's point), 2 closed-loop clients;
- ``np2_b64_q2``: the same server with 4 clients: 2 decode, 2 wait in its queue (the
  closed loops of 4 and 8 do that);
- ``np2``: ``-np 2 -c 4096 -t 2`` (``-b`` at its default);
- ``np4``: ``-np 4 -c 4096 -t 2``, 2 clients pinned to slots 0 and 1 (one forward pass).

Each client sends the long regime's shape (200–400 fresh prompt tokens, 100 outputs:
:func:`llamacpp_after_load.closed_loop`) back to back for :data:`ARM_S`. Per arm it
prints the median chunk gap of every request (the two-sequence decode step: a prompt's
few steps do not move a median of ~100 gaps), the server's own
``predicted_per_token_ms`` median, and the speed gate's lone request
(:func:`llamacpp_sustained.step`) just before and after, the host's speed then.

``--probes`` runs instead ``lyra-simpy profile``'s decode probes (:data:`PROBE_GRID`: one
and two sequences at 200 and 400 tokens of context, 3 rounds) on ``np2_b64`` and ``np4``
in turn: the rows Table 1's fit is made of, each arm's median per batch and context.

::

    PYTHONPATH=src python validation/llamacpp_np_ab.py [--rounds 3] [--probes] [--json OUT]

A server cause shows as an arm slower than ``np4`` in every round with the lone request
level; the host's shows as rounds that move every arm together.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llamacpp_after_load import closed_loop, lone
from llamacpp_points import CONFIGS
from lyra_cli import run

from lyra_simpy.live import llamacpp

ARMS: dict[str, tuple[list[str], int, bool]] = {
    "np2_b64": (CONFIGS["np2_b64"], 2, False),
    "np2_b64_q2": (CONFIGS["np2_b64"], 4, False),
    "np2": (CONFIGS["np2_b64"][:-2], 2, False),
    "np4": (CONFIGS["default"], 2, True),
}
"""Arm: (launch flags, closed-loop clients, pin client k to slot k)."""
ARM_S = 40.0
"""How long each arm's clients send."""
PROBE_GRID: dict[str, Any] = {
    "decode_batch": [1, 2],
    "decode_context": [200, 400],
    "decode_steps": 16,
    "extra_body": {"cache_prompt": False},
    "fragmented_decode_batch": [],
    "mixed_batch": [],
    "prefill_together": [],
    "prefill_tokens": [200],
    "repeats": 3,
    "sliding_window": True,
}
"""The matrix's long-regime profile grid, decode rows only (``--probes``)."""


def arm(name: str, rng: np.random.Generator) -> dict[str, Any]:
    """One arm on a fresh server: the lone request before, the load, the lone request after."""
    flags, clients, pin = ARMS[name]
    log = Path(tempfile.mkdtemp()) / "llama-server.log"
    with llamacpp.Server(llamacpp.server_binary(), llamacpp.model_file(), flags, log) as srv:
        lone(srv.url, 2)  # warm-up
        before = lone(srv.url, 3)
        outs = asyncio.run(closed_loop(srv.url, rng, clients, ARM_S, pin))
        after = lone(srv.url, 3)
    gaps = [float(np.median(np.diff(o.chunk_s[1:]))) * 1000.0
            for o in outs if len(o.chunk_s) > 10]  # fmt: skip
    server = [float(o.timings["predicted_per_token_ms"]) for o in outs
              if o.timings and "predicted_per_token_ms" in o.timings]  # fmt: skip
    return {
        "requests": len(gaps),
        "step_ms": round(statistics.median(gaps), 2),
        "server_per_token_ms": round(statistics.median(server), 2) if server else None,
        "lone_before_ms": round(statistics.median(before), 2),
        "lone_after_ms": round(statistics.median(after), 2),
    }


def table(found: list[dict[str, Any]], arms: list[str]
          ) -> list[tuple[str, list[float], float, float | None, float | None, str]]:  # fmt: skip
    """Per arm: its two-sequence steps by round, their median, that median over ``np4``'s
    (None without an ``np4`` arm), the median of the server's own per-token time (None
    when it gave none) and the lone request before -> after each round."""
    np4 = [g["step_ms"] for g in found if g["arm"] == "np4"]
    out = []
    for name in arms:
        mine = [g for g in found if g["arm"] == name]
        steps = [g["step_ms"] for g in mine]
        med = statistics.median(steps)
        ratio = med / statistics.median(np4) if np4 else None
        own = [g["server_per_token_ms"] for g in mine if g.get("server_per_token_ms")]
        server = statistics.median(own) if own else None
        lones = ", ".join(f"{g['lone_before_ms']}->{g['lone_after_ms']}" for g in mine)
        out.append((name, steps, med, ratio, server, lones))
    return out


def two_over_one(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """``--probes``' rows: per arm, each round's two-sequence over one-sequence decode
    probe at each context (the host's batch-2 cost relative to the batch-1 the speed gate
    reads)."""
    out: dict[str, list[float]] = {}
    for row in rows:
        for key, ms in row.items():
            if key.startswith("b2_"):
                one_seq = row["b1_" + key.split("_", 1)[1]]
                out.setdefault(row["arm"], []).append(round(ms / one_seq, 2))
    return out


def probes(name: str) -> dict[str, float]:
    """:data:`PROBE_GRID`'s decode rows on a fresh *name* server: median ms per
    ``b{batch}_c{context}``."""
    import pandas as pd

    flags = ARMS[name][0]
    tmp = Path(tempfile.mkdtemp())
    (tmp / "grid.yaml").write_text(yaml.safe_dump(PROBE_GRID))
    with llamacpp.Server(llamacpp.server_binary(), llamacpp.model_file(), flags,
                         tmp / "llama-server.log") as srv:  # fmt: skip
        run("profile", "--endpoint", srv.url, "--out", str(tmp / "p.csv"), "--grid",
            str(tmp / "grid.yaml"), log=[])  # fmt: skip
    rows = pd.read_csv(tmp / "p.csv")
    med = rows[rows.phase == "decode"].groupby(["batch_size", "context_len"]).latency_ms.median()
    return {f"b{b}_c{c}": round(float(v), 2) for (b, c), v in med.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--probes", action="store_true",
                    help="the profile's decode probes on np2_b64 and np4 instead")  # fmt: skip
    ap.add_argument("--json", type=Path, default=None, metavar="OUT")
    args = ap.parse_args(argv)
    if args.probes:
        rows = []
        for r in range(args.rounds):
            for name in ("np2_b64", "np4") if r % 2 == 0 else ("np4", "np2_b64"):
                rows.append({"round": r + 1, "arm": name, **probes(name)})
                print(json.dumps(rows[-1]), flush=True)
        if args.json is not None:
            args.json.write_text(json.dumps({"probes": rows}, indent=1) + "\n")
        return 0
    rng = np.random.default_rng(5)
    found: list[dict[str, Any]] = []
    for r in range(args.rounds):
        order = args.arms[r % len(args.arms) :] + args.arms[: r % len(args.arms)]
        for name in order:
            got = {"round": r + 1, "arm": name, **arm(name, rng)}
            found.append(got)
            print(json.dumps(got), flush=True)
    print("arm          step_ms by round            median  / np4's  server's  lone before->after")
    for name, steps, med, ratio, server, lones in table(found, args.arms):
        shown = "—" if ratio is None else f"{ratio:.3f}"
        own = "—" if server is None else f"{server:.2f}"
        print(f"{name:<12} {steps!s:<27} {med:6.2f}  {shown:>7}  {own:>8}  {lones}")
    if args.json is not None:
        args.json.write_text(json.dumps({"arm_s": ARM_S, "outputs": 100, "runs": found},
                                        indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
