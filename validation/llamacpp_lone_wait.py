"""Where a lone request's wait beyond the engine's prompt time goes, by how long the
server idled before it.

``python validation/llamacpp_lone_wait.py POINT_DIR ... [--load poisson_0.3] [--json
OUT]`` reads point folders that ``validate_cpu.py --matrix`` left (e.g.
``results/validation-llamacpp/default_long``, or a copy kept elsewhere): the server's
``llama-server.log`` and the real runs at ``--load``. For each run it finds the run's
requests among the log's tasks (their prompt lengths, in order, match a stretch of the
log's launches; the k-th run the k-th such stretch whose clocks agree), sets the client's
clock on the server's (the median of each task's ``release`` less its request's
``finish_s``) and splits each lone request's TTFT less the engine's ``prompt_ms`` (none
other in flight when it was sent; each run's first apart) into:

- **path**: sent → the log's ``selected slot`` line: HTTP, tokenizing, the task queue
  and the main loop picking the task up;
- **launch**: ``selected slot`` → ``launch_slot_``: the chosen slot's prompt-cache save
  and the cache's search (``server-context.cpp``: ``get_available_slot``);
- **after**: ``launch_slot_`` → the first token less ``prompt_ms``: the idle slots' saves
  (``--cache-idle-slots``) before the prompt starts and the first token's way back.

It prints, per point, the medians of each by the idle before the request
(:data:`IDLE_EDGES_S`). Issue 12, item 65: on item 64's host the path grew with the idle
(medians 7-10 ms after < 0.5 s, 71-77 ms after ≥ 5 s) where items 55, 60 and 61 held 3 ms.

``--first`` splits each run's first request instead, run by run. Item 67: at the long
points the probes right before a run (the gate's, ``--speed-before``'s) left states of
hundreds of tokens in the slots, and the first request's launch copied the chosen one
(``launch`` 48-62 ms at ``-kvu`` long and ``-np 2 -b 64`` long, Poisson 0.3) and its
after the idle ones (89-114 ms at ``-kvu`` long's four slots); ``validate_cpu.py
--matrix --settle`` empties them before each run, and the first request then waited
3-10 ms (kept in ``docs/validation/llamacpp-first-request-item67.json``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llamacpp_idle import sent_alone
from llamacpp_idle import tasks as log_tasks

from lyra_simpy.metrics.io import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
IDLE_EDGES_S = (0.5, 2.0, 5.0)
"""Edges of the idle groups (s): below 0.5, 0.5-2, 2-5, 5 and more."""
MAX_CLOCK_SPREAD_S = 0.05
"""A stretch of the log is a run's only where every task's release less its request's
finish lies within this of the median (the same lengths recur in other runs and loads)."""
PARTS = ("path_ms", "launch_ms", "after_ms", "total_ms")


def match_run(
    tasks: list[dict[str, float]], requests: list[dict[str, Any]], start: int
) -> tuple[int, float] | None:
    """Where *requests* (in order of sending) lie among *tasks* from *start* on, and the
    client clock's offset (s to add to it): the first stretch whose prompt lengths are the
    requests' and whose clocks agree (:data:`MAX_CLOCK_SPREAD_S`); None if none."""
    want = [int(r["input_tokens"]) for r in requests]
    n = len(want)
    for i in range(start, len(tasks) - n + 1):
        if [int(t["tokens"]) for t in tasks[i : i + n]] != want:
            continue
        offs = [t["end"] - r["finish_s"] for t, r in zip(tasks[i : i + n], requests, strict=True)]
        mid = statistics.median(offs)
        if max(abs(o - mid) for o in offs) <= MAX_CLOCK_SPREAD_S:
            return i, mid
    return None


def _runs(point: Path, load: str) -> Iterator[tuple[str, list[dict[str, Any]], list[Any], float]]:
    """Each real run of *point* at *load*: its name, its requests in order of sending, their
    tasks in the log and the client clock's offset (s to add to it)."""
    log = point / "llama-server.log"
    if not log.is_file():
        raise SystemExit(f"llamacpp_lone_wait: {point}: no llama-server.log")
    runs = sorted((point / "real" / load).glob("run*"))
    if not runs:
        raise SystemExit(f"llamacpp_lone_wait: {point}: no real runs at --load {load}")
    tasks = log_tasks(log)
    start = 0
    for run in runs:
        reqs = sorted(read_jsonl(run / "requests.jsonl"), key=lambda r: r["arrival_s"])
        got = match_run(tasks, reqs, start)
        if got is None:
            raise SystemExit(f"llamacpp_lone_wait: {run}: its requests are not in the log")
        i, off = got
        start = i + len(reqs)
        yield run.name, reqs, tasks[i:start], off


def _split(task: dict[str, float], r: dict[str, Any], off: float) -> dict[str, float] | None:
    """Request *r*'s wait beyond its ``prompt_ms`` in :data:`PARTS` (ms) against its *task*
    (module docstring); None for a failed request or one without engine timings."""
    if r.get("first_token_s") is None or not r.get("engine_timings"):
        return None
    sent, first = r["arrival_s"] + off, r["first_token_s"] + off
    prompt_s = r["engine_timings"]["prompt_ms"] / 1e3
    parts = (task["selected"] - sent, task["start"] - task["selected"],
             first - prompt_s - task["start"])  # fmt: skip
    return dict(zip(PARTS, (1e3 * v for v in (*parts, sum(parts))), strict=True))


def lone_parts(point: Path, load: str) -> list[dict[str, float]]:
    """Each lone request of *point*'s real runs at *load* (module docstring): the idle
    before it (s) and its wait's parts (ms)."""
    out: list[dict[str, float]] = []
    for _, reqs, tasks, off in _runs(point, load):
        for k, (task, r) in enumerate(zip(tasks, reqs, strict=True)):
            if k == 0 or not sent_alone(reqs, k):
                continue
            if (ms := _split(task, r, off)) is not None:
                idle = r["arrival_s"] - max(o["finish_s"] for o in reqs[:k])
                out.append({"idle_s": idle, **ms})
    return out


def first_parts(point: Path, load: str) -> list[dict[str, Any]]:
    """Each real run's first request at *load* (``--first``): the run, its prompt tokens
    and its wait's parts (ms)."""
    out: list[dict[str, Any]] = []
    for name, reqs, tasks, off in _runs(point, load):
        if (ms := _split(tasks[0], reqs[0], off)) is not None:
            out.append({"run": name, "tokens": int(reqs[0]["input_tokens"]),
                        **{k: round(v, 1) for k, v in ms.items()}})  # fmt: skip
    return out


def by_idle(rows: list[dict[str, float]]) -> list[dict[str, Any]]:
    """*rows* grouped by :data:`IDLE_EDGES_S`: each group's requests and the medians of
    their parts (ms, one decimal); empty groups left out."""
    edges = (0.0, *IDLE_EDGES_S, float("inf"))
    out = []
    for lo, hi in itertools.pairwise(edges):
        grp = [r for r in rows if lo <= r["idle_s"] < hi]
        if grp:
            ms = {p: round(statistics.median(r[p] for r in grp), 1) for p in PARTS}
            out.append({"idle_s": f"{lo:g}-{hi:g}", "requests": len(grp), **ms})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("points", nargs="+", type=Path, metavar="POINT_DIR")
    ap.add_argument("--load", default="poisson_0.3", help="the load read (default poisson_0.3)")
    ap.add_argument("--first", action="store_true",
                    help="each run's first request instead of the lone ones")  # fmt: skip
    ap.add_argument("--json", type=Path, default=None, metavar="OUT")
    args = ap.parse_args(argv)
    got: dict[str, Any] = {}
    for point in args.points:
        if args.first:
            firsts = first_parts(point, args.load)
            got[str(point)] = {"first": firsts}
            print(f"{point} ({args.load}), each run's first request, ms:")
            for f in firsts:
                print(f"  {f['run']}: {f['tokens']} tokens  path {f['path_ms']:6.1f}  launch "
                      f"{f['launch_ms']:5.1f}  after {f['after_ms']:6.1f}  total "
                      f"{f['total_ms']:6.1f}")  # fmt: skip
            continue
        rows = lone_parts(point, args.load)
        got[str(point)] = {"lone": len(rows), "by_idle": by_idle(rows)}
        print(f"{point} ({args.load}, {len(rows)} lone requests), medians in ms:")
        for g in got[str(point)]["by_idle"]:
            print(f"  idle {g['idle_s']:>7s} s: {g['requests']:3d}  path {g['path_ms']:6.1f}  "
                  f"launch {g['launch_ms']:5.1f}  after {g['after_ms']:6.1f}  "
                  f"total {g['total_ms']:6.1f}")  # fmt: skip
    if args.json:
        said = sys.argv[1:] if argv is None else argv
        args.json.write_text(
            json.dumps({"argv": said, "load": args.load, "points": got}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
