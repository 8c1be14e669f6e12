"""What llama-server's prompt cache in RAM does with a prompt it has seen before: a
replay sent again with the same prompt ids (docs/VALIDATION-llamacpp.md item 84).

When llama-server gives a request a slot (``get_available_slot``,
``tools/server/server-context.cpp``, llama.cpp 0c1e570) it saves the slot's state into
its cache (``server_slot::prompt_save``: a new buffer, ``server_prompt_cache::alloc`` in
``server-task.cpp``) and then looks in the cache for a state whose tokens cover the new
prompt better than the slot's (``server_prompt_cache::load``: at least a quarter of the
cached state's tokens in common). It restores the best into the slot, frees that state's
buffer and drops it from the cache, whatever the request's ``cache_prompt``: with
``cache_prompt: false`` the restored cells are then thrown away and the prompt computed
whole. So a prompt sent a second time costs a restore at its launch, and the save of
the next launch reuses the memory the restore freed instead of pages the host has to
give afresh.

``python validation/llamacpp_prompt_reuse.py [--flags "-np 4 -c 4096 -t 2"] [--prompts 6]
[--tokens 300] [--json OUT]`` starts ``llama-server FLAGS -v`` (verbose: the cache's own
trace lines) and sends ``--prompts`` prompts of ``--tokens`` random ids with 20 outputs,
one after another, as ``lyra-simpy replay`` sends them (``cache_prompt: false``); then the
same prompts again in the same order. From the log (:func:`cache_events`) it prints each
save that copied (from ``saving prompt`` to the cache's next ``cache state`` line) and
each restore (``found better prompt`` to ``cache state``), in ms and in ms a token of the
state, for the first pass and the second.

``--pinned`` runs instead the profile's prompt-cache probe's protocol twice over
(:func:`pinned`): for each size *N* of ``--sizes``, a prompt of *N* tokens and one output
in slot 1, then a lone prompt of 16 tokens in slot 0, whose launch saves slot 1's state
(a fresh save); then the same *N* prompts again in slot 1 (each restored from the cache at
its launch) and a lone prompt after each (a save after a restore); ``--rounds`` times. It
prints each size's saves in both passes: whether a probe can read the cheaper price by
resending its prompts.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from llamacpp_idle import clock_s
from llamacpp_points import OUT, ROOT
from llamacpp_save_price import TIME as STAMP

FLAGS = ["-np", "4", "-c", "4096", "-t", "2"]
"""``-np 4`` short's and long's server (``validate_cpu.py --matrix``'s ``default``): the
flags a user launches with."""
SAVING = re.compile(r"saving prompt with length (\d+)")
LOAD = "found better prompt"
STATE = "cache state:"
SKIP = "already in the cache"


def cache_events(lines: list[str]) -> list[dict[str, Any]]:
    """The cache's saves that copied and its restores, in the order of a verbose
    llama-server log's *lines*: kind (``save`` or ``load``), ms to the next ``cache
    state`` line, and for a save the state's tokens. A save the cache skipped (it holds
    the prompt whole) is left out."""
    out: list[dict[str, Any]] = []
    open_: dict[str, Any] | None = None
    for line in lines:
        stamp = STAMP.match(line)
        if stamp is None:
            continue
        if (m := SAVING.search(line)) is not None:
            open_ = {"kind": "save", "t": clock_s(*stamp.groups()), "tokens": int(m.group(1))}
        elif SKIP in line and open_ is not None and open_["kind"] == "save":
            open_ = None
        elif LOAD in line:
            open_ = {"kind": "load", "t": clock_s(*stamp.groups())}
        elif STATE in line and open_ is not None:
            t = open_.pop("t")
            out.append({**open_, "ms": round(1e3 * (clock_s(*stamp.groups()) - t), 3)})
            open_ = None
    return out


def passes(events: list[dict[str, Any]]) -> dict[str, Any]:
    """*events* split at the first restore (the second pass's first prompt): the first
    pass's saves, the second's saves and restores, each as ms and the medians (ms, and
    ms a token for the saves)."""
    first = next((i for i, e in enumerate(events) if e["kind"] == "load"), len(events))

    def part(kind: str, evs: list[dict[str, Any]]) -> dict[str, Any]:
        got = [e for e in evs if e["kind"] == kind]
        out: dict[str, Any] = {"ms": [e["ms"] for e in got]}
        if got:
            out["median_ms"] = round(statistics.median(out["ms"]), 2)
        if got and kind == "save":
            per = [e["ms"] / e["tokens"] for e in got]
            out["median_ms_per_token"] = round(statistics.median(per), 4)
            out["tokens"] = sorted({e["tokens"] for e in got})
        return out

    return {"first": {"saves": part("save", events[:first])},
            "second": {"saves": part("save", events[first:]),
                       "loads": part("load", events[first:])}}  # fmt: skip


def _in_turn(url: str, requests: list[tuple[list[int], int, int | None]]) -> None:
    """*requests* (prompt ids, outputs, slot or None) sent one after another, each once
    the one before it is done, as ``lyra-simpy replay`` sends them (``cache_prompt:
    false``)."""
    import asyncio

    from lyra_simpy.live.client import new_client, send

    async def go() -> None:
        t0 = time.perf_counter()
        async with new_client() as client:
            for ids, outputs, slot in requests:
                extra = {"cache_prompt": False, **({} if slot is None else {"id_slot": slot})}
                out = await send(client, url, "openai", ids, outputs, 300.0, t0, extra)
                if out.error:
                    raise SystemExit(f"llamacpp_prompt_reuse: a request failed ({out.error})")

    asyncio.run(go())


def send_twice(url: str, prompts: int, tokens: int) -> None:
    """*prompts* prompts of *tokens* random ids, 20 outputs each, one at a time; then the
    same again."""
    rng = np.random.default_rng(84)
    ids = [rng.integers(1000, 20000, size=tokens).tolist() for _ in range(prompts)]
    _in_turn(url, [(p, 20, None) for p in ids * 2])


def pinned(url: str, sizes: list[int], rounds: int) -> None:
    """The profile probe's pairs (module docstring, ``--pinned``), *rounds* times: each of
    *sizes* in slot 1 then a lone prompt in slot 0, fresh prompts, then the same again."""
    rng = np.random.default_rng(84)
    requests: list[tuple[list[int], int, int | None]] = []
    for _ in range(rounds):
        prompts = [rng.integers(1000, 20000, size=n).tolist() for n in sizes]
        for _ in range(2):  # fresh, then the same prompts again
            for ids in prompts:
                requests += [(ids, 1, 1), (rng.integers(1000, 20000, size=16).tolist(), 1, 0)]
    _in_turn(url, requests)


def pinned_saves(events: list[dict[str, Any]], sizes: list[int], rounds: int) -> dict[str, Any]:
    """The saves of slot 1's states in :func:`pinned`'s order (the lone prompts' own 16
    tokens left out): per size, the fresh pass's ms and the pass after a restore's."""
    saves = [e for e in events if e["kind"] == "save" and e["tokens"] in sizes]
    want = 2 * rounds * len(sizes)
    if len(saves) != want:
        raise SystemExit(f"llamacpp_prompt_reuse --pinned: {len(saves)} saves of slot 1 in "
                         f"the log, expected {want}")  # fmt: skip
    out: dict[str, Any] = {str(n): {"fresh_ms": [], "after_restore_ms": []} for n in sizes}
    for i, e in enumerate(saves):
        kind = "fresh_ms" if (i // len(sizes)) % 2 == 0 else "after_restore_ms"
        out[str(e["tokens"])][kind].append(e["ms"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flags", default=" ".join(FLAGS), help="the server's flags")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--pinned", action="store_true", help="the profile probe's protocol")
    ap.add_argument("--sizes", default="256,512,768", help="with --pinned: slot 1's prompts")
    ap.add_argument("--rounds", type=int, default=3, help="with --pinned")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x.isdigit()]
    if len(sizes) != len(args.sizes.split(",")) or not all(32 <= n <= 2000 for n in sizes):
        ap.error(f"--sizes: got {args.sizes!r}, must be token counts of 32 to 2000, comma-"
                 "separated")  # fmt: skip
    if args.rounds < 1:
        ap.error(f"--rounds: got {args.rounds}, must be 1 or more")
    if args.prompts < 2:
        ap.error(f"--prompts: got {args.prompts}, must be 2 or more")
    if not 32 <= args.tokens <= 2000:
        ap.error(f"--tokens: got {args.tokens}, must be 32 to 2000")
    from lyra_simpy.live import llamacpp

    log = OUT / "prompt_reuse" / "llama-server.log"
    flags = [*args.flags.split(), "-v"]
    with llamacpp.Server(llamacpp.server_binary(), llamacpp.model_file(), flags, log) as srv:
        if args.pinned:
            pinned(srv.url, sizes, args.rounds)
        else:
            send_twice(srv.url, args.prompts, args.tokens)
    events = cache_events(log.read_text(errors="replace").splitlines())
    if args.pinned:
        by_size = pinned_saves(events, sizes, args.rounds)
        print(f"llama-server {args.flags}: the profile probe's pairs, {args.rounds} rounds")
        for n, got_n in by_size.items():
            print(f"  {n:>5} tokens: fresh {got_n['fresh_ms']} ms, after a restore "
                  f"{got_n['after_restore_ms']} ms")  # fmt: skip
        if args.json:
            argv_kept = sys.argv[1:] if argv is None else argv
            args.json.write_text(json.dumps({"argv": argv_kept, "flags": args.flags,
                                             "pinned": by_size}, indent=1) + "\n")  # fmt: skip
        return 0
    got = passes(events)
    first, second = got["first"]["saves"], got["second"]
    print(f"llama-server {args.flags}: {args.prompts} prompts of {args.tokens} tokens, twice\n"
          f"  first pass, each save: {first['ms']} ms (median "
          f"{first.get('median_ms_per_token')} ms a token)\n"
          f"  second pass, each restore: {second['loads']['ms']} ms\n"
          f"  second pass, each save: {second['saves']['ms']} ms (median "
          f"{second['saves'].get('median_ms_per_token')} ms a token)")  # fmt: skip
    if args.json:
        argv_kept = sys.argv[1:] if argv is None else argv
        args.json.write_text(json.dumps({"argv": argv_kept, "flags": args.flags, **got},
                                        indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    raise SystemExit(main())
