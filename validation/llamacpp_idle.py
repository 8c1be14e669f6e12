"""Did the host slow a prompt that came after the server idled? Lone prompts in the
server's own log against the point's probes.

``python validation/llamacpp_idle.py [CFG_REGIME ...]`` reads what ``validate_cpu.py
--matrix`` left in ``results/validation-llamacpp`` (no server): each point's
``llama-server.log`` (the profile's probes, the speed gate's probes and every real run,
in order) and its ``profile.csv``. For every task the server ran alone — no other task
between its launch and the end of its prompt — it takes the engine's own prompt time
(``print_timing: prompt eval time``, the timing the probes' prefill rows are made of)
less the probes' lone prompt of that length (interpolated between the ``prefill`` rows),
and groups these excesses by how long the server had been idle before the task
(launch less the last release). It prints, per idle group, how many tasks and the
median excess in ms.

Issue 12: on one run of ``-np 2 -b 64`` short (2026-12-02 10:55 UTC) a lone prompt
after ≥ 0.3 s idle took one engine step (~20 ms) longer than its probe, after 5 s two,
while prompts that followed other work did not; the same point 20 minutes later showed
+2-5 ms. The simulator charges a prompt the same whenever it comes, so such a host puts
its light-load TTFT ~20 % low. The probes run back to back (idle < 0.1 s): they never
see it.
"""

from __future__ import annotations

import argparse
import bisect
import csv
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "validation-llamacpp"
LINE = re.compile(
    r"(\d+)\.(\d+)\.(\d+)\.(\d+) I slot\s+(\w+)\s*: id\s+(\d+) \| task (-?\d+) \| (.*)"
)
"""A slot's line: the time (minutes.seconds.ms.µs since start), what, slot, task, text."""
PROMPT = re.compile(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens")
IDLE_S = (0.1, 0.3, 1.0)
"""Edges of the idle groups, in seconds (the probes run back to back: below the first)."""


def clock_s(minutes: str, seconds: str, ms: str, us: str) -> float:
    """A log line's time (its ``minutes.seconds.ms.µs`` fields) in seconds since the
    server started."""
    return int(minutes) * 60 + int(seconds) + int(ms) / 1e3 + int(us) / 1e6


def slot_lines(log: Path) -> Iterator[tuple[float, str, int, str]]:
    """Every slot line of a llama-server *log*, in order: its time (s since the server
    started), what (``launch_slot_``, ``get_availabl``, ...), its task and its text."""
    for line in log.read_text(errors="replace").splitlines():
        m = LINE.match(line)
        if m is None:
            continue
        yield clock_s(*m.groups()[:4]), m.group(5), int(m.group(7)), m.group(8)


def tasks(log: Path) -> list[dict[str, float]]:
    """Each task the log shows launched, prompted and released, in order of launch:
    launch and release times (s), the ``selected slot`` line's time before its launch
    (s; the launch's own where none), prompt tokens and the engine's prompt time (ms)."""
    found: dict[int, dict[str, float]] = {}
    selected: float | None = None
    for t, kind, task, rest in slot_lines(log):
        if kind == "get_availabl" and "selected slot" in rest:
            selected = t
        elif kind == "launch_slot_":
            found[task] = {"start": t, "selected": t if selected is None else selected}
            selected = None
        elif task in found and kind == "print_timing" and (p := PROMPT.search(rest)):
            found[task]["prompt_ms"], found[task]["tokens"] = float(p.group(1)), int(p.group(2))
        elif task in found and kind == "release":
            found[task]["end"] = t
    return [d for d in found.values() if {"prompt_ms", "end"} <= d.keys()]


def sent_alone(requests: list[dict[str, Any]], k: int) -> bool:
    """Whether request *k* of a run's *requests* (in order of sending) was sent with none
    of those before it in flight (``arrival_s`` before its own, ``finish_s`` after)."""
    sent = requests[k]["arrival_s"]
    return not any(o["arrival_s"] < sent < o["finish_s"] for o in requests[:k])


def lone_prompt_ms(profile: Path) -> tuple[np.ndarray, np.ndarray]:
    """The probes' lone prompts: (tokens, engine ms), by length."""
    with profile.open() as f:
        rows = [r for r in csv.DictReader(f) if r["phase"] == "prefill" and r["batch_size"] == "1"]
    pairs = sorted((int(r["input_tokens"]), float(r["latency_ms"])) for r in rows)
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def excess_by_idle(point: Path) -> list[tuple[str, int, float | None]]:
    """(idle group, lone tasks, median excess ms) for one point."""
    done = tasks(point / "llama-server.log")
    xs, ys = lone_prompt_ms(point / "profile.csv")
    done.sort(key=lambda d: d["start"])
    ends = sorted(d["end"] for d in done)
    groups: dict[int, list[float]] = {k: [] for k in range(len(IDLE_S) + 1)}
    latest = -np.inf  # the last release of the tasks launched before this one
    for i, d in enumerate(done):
        prompt_end = d["start"] + d["prompt_ms"] / 1e3
        after = done[i + 1]["start"] if i + 1 < len(done) else np.inf
        alone = latest <= d["start"] and after >= prompt_end
        latest = max(latest, d["end"])
        if not alone:
            continue  # another task shared its prompt's steps
        k = bisect.bisect_left(ends, d["start"]) - 1
        if k < 0:
            continue  # the first task: no idle time known
        idle = d["start"] - ends[k]
        groups[bisect.bisect_right(IDLE_S, idle)].append(
            d["prompt_ms"] - float(np.interp(d["tokens"], xs, ys))
        )
    edges = ["0", *(f"{e:g}" for e in IDLE_S), "∞"]
    return [
        (f"{edges[k]}-{edges[k + 1]} s", len(v), float(np.median(v)) if v else None)
        for k, v in groups.items()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llamacpp_idle.py")
    parser.add_argument("points", nargs="*", help="e.g. np2_b64_short (default: every one)")
    args = parser.parse_args(argv)
    points = [OUT / p for p in args.points] or sorted(p for p in OUT.iterdir() if p.is_dir())
    for point in points:
        if not (point / "llama-server.log").is_file():
            continue
        cells = [
            f"{name}: {n} lone, {'—' if ex is None else f'{ex:+.1f} ms'}"
            for name, n, ex in excess_by_idle(point)
        ]
        print(f"{point.name}: idle before a lone prompt -> its prompt time less the probe's")
        print("  " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
