"""What llama-server's prompt-cache save cost per token through a point's whole server
log, while the cache grew and once it evicted, against what the profile's probe read.

With ``--cache-ram`` (default 8192 MiB) the server copies a slot's state into a newly
allocated buffer when it gives that slot a request (``server_prompt_cache::alloc``,
``tools/server/server-task.cpp``, llama.cpp 0c1e570; the log's ``selected slot`` line
comes before the copy, ``launch_slot_`` after), and once the cache holds its limit it
first frees its oldest states (the log's ``making room for prompt cache entry``). The
buffer's pages are the host's to give: fresh ones cost ~11 µs each on the matrix's VMs,
ones freed a moment before ~1.4 µs (docs/VALIDATION-llamacpp.md item 65,
``validation/host_memory.py``), so a cache that evicts should save at the cheap price.

``python validation/llamacpp_save_price.py CFG/REGIME... [--json OUT]`` reads each
point's ``llama-server.log`` left by ``validate_cpu.py --matrix`` (after
``llamacpp_store.py unpack`` on a fresh clone) and replays the slots: a slot's state is
its last request's ``n_tokens`` at release, unsaved until a launch saves it (its own
launch, or any later one while it is idle: ``--cache-idle-slots``). For each launch whose
own slot held an unsaved state of at least ``--least`` tokens it takes the time from
``selected slot`` to ``launch_slot_`` over the tokens saved, and gives the median (the
10th and 90th percentiles, and the mean) of those, apart for the launches before the cache's first
eviction and after it. It prints them beside
the point's probe (the matrix's ``prompt_save``) and when the cache first evicted.

``--by-run`` prices each real run apart (:func:`by_run`, item 84): a run's requests in
the log are the first stretch of finished requests after the last run's whose prompts
(``prompt eval time``'s tokens, printed as a request finishes) are that run's requests'
``input_tokens``, every request once (the matrix sends ``cache_prompt: false``, so the
server evaluates every prompt token), the runs in the order they ran (the point's
``run_order``: round by round since item 86, load by load before); its window runs from
the first of those requests' launches to the last one's end, and its price is the time
the launches in it took to save their own slots' states over the tokens they saved (all
of them, not a median: a request's TTFT sums its saves).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from llamacpp_idle import LINE, PROMPT, clock_s
from llamacpp_points import (
    CACHE_RAM_MIB,
    CONFIGS,
    KV_KIB_PER_CELL,
    OUT,
    point_folder,
    runs_as_ran,
)

N_TOKENS = re.compile(r"n_tokens = (\d+)")
EVICT = "making room for prompt cache entry"
TIME = re.compile(r"(\d+)\.(\d+)\.(\d+)\.(\d+) ")


def launches(log: Path) -> tuple[list[dict[str, Any]], float | None]:
    """Every launch in *log* whose own slot held a state to save: when (s since the
    server started), the tokens saved, ms from ``selected slot`` to ``launch_slot_`` and
    whether the cache had evicted before; and when it first evicted (None: never)."""
    unsaved: dict[int, int] = {}
    running: set[int] = set()
    selected: tuple[float, int] | None = None
    first_evict: float | None = None
    out: list[dict[str, Any]] = []
    for line in log.read_text(errors="replace").splitlines():
        if first_evict is None and EVICT in line and (at := TIME.match(line)):
            first_evict = clock_s(*at.groups())
            continue
        m = LINE.match(line)
        if m is None:
            continue
        t = clock_s(*m.groups()[:4])
        kind, slot, text = m.group(5), int(m.group(6)), m.group(8)
        if kind == "release" and (n := N_TOKENS.search(text)):
            unsaved[slot] = int(n.group(1))
            running.discard(slot)
        elif kind == "get_availabl" and "selected slot" in text:
            selected = (t, slot)
        elif kind == "launch_slot_" and selected is not None and selected[1] == slot:
            tokens = unsaved.get(slot, 0)
            if tokens:
                out.append({"t": t, "tokens": tokens, "ms": 1e3 * (t - selected[0]),
                            "evicting": first_evict is not None})  # fmt: skip
            running.add(slot)
            unsaved = {s: 0 if s not in running else n for s, n in unsaved.items()}
            selected = None
    return out, first_evict


def price(rows: list[dict[str, Any]], least: int) -> dict[str, Any] | None:
    """The launches of *rows* that saved at least *least* tokens: how many, the tokens'
    median, and the 10th, 50th and 90th percentiles and the mean of their ms a token
    saved (None: none). Each launch's own ratio, not a line through them: the price is bimodal while
    the cache grows (a fresh page or one freed a moment before)."""
    kept = [r for r in rows if r["tokens"] >= least]
    if not kept:
        return None
    per = np.array([r["ms"] / r["tokens"] for r in kept])
    p10, p50, p90 = (round(float(x), 4) for x in np.percentile(per, [10, 50, 90]))
    return {"launches": len(kept), "median_tokens": float(np.median([r["tokens"] for r in kept])),
            "ms_per_token": p50, "p10": p10, "p90": p90,
            "mean": round(float(per.mean()), 4)}  # fmt: skip


def point(key: str, least: int, results: dict[str, Any] | None) -> dict[str, Any]:
    """One point's prices (module docstring), its probe from the matrix's *results*
    (None: there is no ``matrix.json``)."""
    log = point_folder(key, OUT) / "llama-server.log"
    if not log.is_file() or results is None:
        raise SystemExit(
            f"{key}: no {log} or {OUT / 'matrix.json'} (run validate_cpu.py --matrix, or "
            "llamacpp_store.py unpack)"
        )
    rows, first = launches(log)
    probe = results[key].get("prompt_save") or {}
    return {
        "probe_ms_per_token": probe.get("ms_per_token"),
        "first_eviction_min": None if first is None else round(first / 60, 1),
        "log_min": round(max(r["t"] for r in rows) / 60, 1) if rows else None,
        "growing": price([r for r in rows if not r["evicting"]], least),
        "evicting": price([r for r in rows if r["evicting"]], least),
    }


def prompts(log: Path) -> list[tuple[float, float, int]]:
    """Every request *log*'s server finished, in that order: when it was launched and
    when it finished (s since the server started), and its prompt's tokens (``prompt
    eval time``, printed as it finishes)."""
    out, launched = [], {}
    for line in log.read_text(errors="replace").splitlines():
        if (m := LINE.match(line)) is None:
            continue
        t, task = clock_s(*m.groups()[:4]), m.group(7)
        if m.group(5) == "launch_slot_":
            launched[task] = t
        elif p := PROMPT.search(m.group(8)):
            out.append((launched.get(task, t), t, int(p.group(2))))
    return out


def by_run(key: str, res: dict[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Each load's real runs in the point's log (module docstring), in the order they ran
    (the stored point *res*'s, :func:`~llamacpp_points.runs_as_ran`): the window's start
    (min since the server started), the own-slot launches that saved, the tokens they
    saved and their ms a token; a run whose prompts the log lacks is refused."""
    here = point_folder(key, OUT)
    log = here / "llama-server.log"
    rows, _ = launches(log)
    seen = prompts(log)
    tokens = [n for _, _, n in seen]
    start = 0
    out: dict[str, list[dict[str, Any]]] = {}
    for load, run in runs_as_ran(here, res):
        lines = (run / "requests.jsonl").read_text().splitlines()
        want = Counter(json.loads(line)["input_tokens"] for line in lines)
        n = len(lines)
        at = next((i for i in range(start, len(seen) - n + 1)
                   if Counter(tokens[i : i + n]) == want), None)  # fmt: skip
        if at is None:
            raise SystemExit(f"{key}: {run}'s prompts are not in {log} after the run before")
        t0 = min(launch for launch, _, _ in seen[at : at + n])
        t1 = seen[at + n - 1][1]
        start = at + n
        kept = [r for r in rows if t0 <= r["t"] <= t1]
        saved = sum(r["tokens"] for r in kept)
        out.setdefault(load, []).append({
            "run": run.name, "start_min": round(t0 / 60, 1), "launches": len(kept),
            "tokens": saved,
            "ms_per_token": round(sum(r["ms"] for r in kept) / saved, 4) if saved else None,
        })  # fmt: skip
    return out


SKIP = 3
"""Saved states :func:`state_sizes` may pass over in a row to find the next dropped one."""
SIZE = re.compile(r"removing oldest entry \(size = ([\d.]+) MiB\)")


def state_sizes(log: Path, cfg: str) -> dict[str, Any]:
    """The sizes of the states the cache of *log*'s server dropped (``making room ...
    size = X MiB``, oldest first) beside what the engine model gives the states the log
    saved, in the order saved (``LlamaCppConfig.state_kib`` with
    :data:`~llamacpp_points.KV_KIB_PER_CELL`, a prompt's checkpoints where the engine
    model makes them; item 87): the cache drops its states in the order it saved them,
    so the k-th dropped is the k-th saved, as long as none was skipped (a prompt the
    cache held already) or restored (a run that sent a prompt again). Each pair's
    relative error, how many pairs in a row from the first agree within 1 %, and how
    many agree when a saved state the dropped ones lack is passed over (at most
    :data:`SKIP` in a row; how many were); and after how many saved states the log
    first drops one, beside where the engine model's sizes would first overfill
    ``--cache-ram`` (a state restored or skipped, which the model does not see, moves
    the log's later)."""
    from lyra_simpy.live.llamacpp_probes import llamacpp_config
    from lyra_simpy.live.profile_grid import ProfileGrid

    c = llamacpp_config(" ".join(CONFIGS[cfg]), ProfileGrid(sliding_window=True))
    assert c is not None
    c = c.model_copy(update={"kv_kib_per_cell": KV_KIB_PER_CELL})
    prompt: dict[str, int] = {}
    unsaved: dict[int, float] = {}
    running: set[int] = set()
    saved: list[float] = []
    dropped: list[float] = []
    first_drop: int | None = None
    """States saved before the log's first drop."""
    for line in log.read_text(errors="replace").splitlines():
        if (d := SIZE.search(line)) is not None:
            dropped.append(float(d.group(1)))
            if first_drop is None:
                first_drop = len(saved)
            continue
        m = LINE.match(line)
        if m is None:
            continue
        kind, slot, task, text = m.group(5), int(m.group(6)), m.group(7), m.group(8)
        if (p := PROMPT.search(text)) is not None:
            prompt[task] = int(p.group(2))
        elif kind == "release" and (n := N_TOKENS.search(text)):
            unsaved[slot] = _state_mib(c, prompt.get(task, 0), int(n.group(1)))
            running.discard(slot)
        elif kind == "launch_slot_":
            for i in [slot, *sorted(k for k in unsaved if k != slot)]:
                if i in unsaved and (i == slot or i not in running):
                    saved.append(unsaved.pop(i))
            running.add(slot)
    errors = [got / want - 1.0 for got, want in zip(dropped, saved, strict=False)]
    run = next((k for k, e in enumerate(errors) if abs(e) > 0.01), len(errors))
    # the same, a saved state the cache's order lacks passed over (at most SKIP in a row)
    k, skipped, matched, paired = 0, 0, 0, []
    for got in dropped:
        ahead = next((j for j in range(k, min(k + SKIP + 1, len(saved)))
                      if abs(got / saved[j] - 1.0) <= 0.01), None)  # fmt: skip
        if ahead is None:
            k += 1
            continue
        skipped += ahead - k
        matched += 1
        paired.append(got / saved[ahead] - 1.0)
        k = ahead + 1
    total, model_drop = 0.0, None
    for k, mib in enumerate(saved):  # the cache, as the engine model fills it
        if total + mib > CACHE_RAM_MIB:
            model_drop = k
            break
        total += mib
    return {
        "dropped": len(dropped), "saved": len(saved), "agree_from_first": run,
        "first_drop_after_saves": first_drop, "model_first_drop_after_saves": model_drop,
        "within_1pct": sum(abs(e) <= 0.01 for e in errors),
        "within_1pct_passing_over": matched, "passed_over": skipped,
        "error_p10_p50_p90": [round(float(x), 4) for x in np.percentile(errors, [10, 50, 90])]
        if errors else None,
        "first": [[round(g, 3), round(w, 3)] for g, w in zip(dropped[:8], saved[:8], strict=False)],
    }  # fmt: skip


def _state_mib(c: Any, prompt: int, tokens: int) -> float:
    """A state of *tokens* whose prompt had *prompt* tokens, MiB: its checkpoints where
    the engine model makes them (a chunk that ends within ``n_ubatch`` of the prompt's
    end, after the first; the chunks split at the checkpoint stops and ``n_batch``)."""
    from lyra_simpy.policies.llamacpp import prompt_chunk

    done, ckpt = 0, 0.0
    while done < prompt:
        take = prompt_chunk(prompt - done, c.batch_tokens, c.checkpoint_stops)
        if c.checkpoint_before(done, prompt - done - take):
            ckpt += c.checkpoint_kib(done)
        done += take
    return c.state_kib(tokens, ckpt) / 1024.0


def _fmt(p: dict[str, Any] | None) -> str:
    if p is None:
        return "-"
    return (
        f"median {p['ms_per_token']:.4f} ms a token (10-90 %: {p['p10']:.4f}-"
        f"{p['p90']:.4f}, mean {p['mean']:.4f}; {p['launches']} launches of a median "
        f"{p['median_tokens']:.0f} tokens)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("points", nargs="+", metavar="CFG/REGIME")
    parser.add_argument(
        "--least",
        type=int,
        default=100,
        metavar="TOKENS",
        help="launches saving fewer tokens are left out (default 100)",
    )
    parser.add_argument("--by-run", action="store_true",
                        help="price each real run apart (item 84)")  # fmt: skip
    parser.add_argument("--sizes", action="store_true",
                        help="the states the cache dropped against the engine model's "
                        "sizes of those saved (item 87)")  # fmt: skip
    parser.add_argument("--log", type=Path, default=None, metavar="FILE",
                        help="with --sizes and one point: this server log instead of the "
                        "point's (e.g. item 87's: llamacpp-fill-item87.tar.xz)")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, metavar="OUT")
    args = parser.parse_args(argv)
    if args.log is not None and (not args.sizes or len(args.points) != 1):
        raise SystemExit(f"--log: got {args.log}, which goes with --sizes and one point "
                         f"(got {len(args.points)})")  # fmt: skip
    if args.sizes:
        sizes = {}
        for key in args.points:
            log = args.log or point_folder(key, OUT) / "llama-server.log"
            if not log.is_file():
                raise SystemExit(f"{key}: no {log} (run validate_cpu.py --matrix, or "
                                 "llamacpp_store.py unpack)")  # fmt: skip
            sizes[key] = got = state_sizes(log, key.split("/")[0])
            print(f"{key}: {got['dropped']} states dropped, {got['saved']} saved; the k-th "
                  f"dropped against the k-th saved: {got['agree_from_first']} in a row from "
                  f"the first within 1 %, {got['within_1pct']} in all; "
                  f"{got['within_1pct_passing_over']} passing over "
                  f"{got['passed_over']} saved; error 10/50/90 %: "
                  f"{got['error_p10_p50_p90']}; first drop after {got['first_drop_after_saves']} "
                  f"saves, the model's after {got['model_first_drop_after_saves']}")  # fmt: skip
        if args.json is not None:
            args.json.write_text(json.dumps({"sizes": sizes}, indent=1) + "\n")
        return 0
    matrix = OUT / "matrix.json"
    results = json.loads(matrix.read_text())["results"] if matrix.is_file() else None
    got = {key: point(key, args.least, results) for key in args.points}
    for key, p in got.items():
        first = p["first_eviction_min"]
        evict = "never" if first is None else f"{first} min into the server's {p['log_min']}"
        print(f"{key}: probe {p['probe_ms_per_token']} ms a token; first eviction {evict}\n"
              f"  growing:  {_fmt(p['growing'])}\n  evicting: {_fmt(p['evicting'])}")  # fmt: skip
    runs = ({key: by_run(key, (results or {}).get(key)) for key in args.points}
            if args.by_run else None)  # fmt: skip
    for key, loads in (runs or {}).items():
        print(f"{key}: each run's own-slot saves (start min, launches, tokens, ms a token)")
        for load, got_runs in loads.items():
            print(f"  {load:12s} " + " | ".join(
                f"{r['start_min']:.1f} {r['launches']} {r['tokens']} "
                + ("-" if r["ms_per_token"] is None else f"{r['ms_per_token']:.4f}")
                for r in got_runs))  # fmt: skip
    if args.json is not None:
        kept: dict[str, Any] = {"least": args.least, "points": got}
        if runs is not None:
            kept["by_run"] = runs
        args.json.write_text(json.dumps(kept, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
