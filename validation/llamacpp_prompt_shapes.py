"""A point's steps shape by shape against Table 1's charge (``compare --steps``, finer).

``compare --steps`` gives the runs' prompt steps over the charge by prompt tokens alone.
This splits them by what else shaped them: the decoders beside them, the prompts in the
step, the prompt tokens, the forward passes the rebuild counted (with per-slot KV one per
run of consecutive slot ids, from the replayed slots) and whether a request arrived during
the step. Per load of a stored point (``results/validation-llamacpp/CFG_REGIME``): the
decode-only and prompt steps' median ratios, then each shape seen at least three times:
its count, median ratio, median measured and charged ms. Steps that hid engine steps are
left out, as ``compare --steps`` leaves them out. ``--slots``: every run's slots from
the server's log against the rebuild's replayed ones (:func:`slots_against_log`; the
point must have been run with ``--speed-before``, whose pinned readings mark where each
run starts in the log).

    PYTHONPATH=src python validation/llamacpp_prompt_shapes.py \
        results/validation-llamacpp/default_short [--slots]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llamacpp_points import LOADS, point_key, runs_as_ran

from lyra_simpy.calibration.runs import StepRebuild, rebuild_for, steps_of_runs
from lyra_simpy.live.stepcheck import charged_ms
from lyra_simpy.scenario import load_scenario

BINS = ((8, "1-8"), (16, "9-16"), (32, "17-32"), (64, "33-64"))


def tokens_bin(tokens: int) -> str:
    """The prompt-token range of a step."""
    return next((label for top, label in BINS if tokens <= top), "65+")


def shapes(here: Path, load: str) -> list[str]:
    """The lines for one load of the point in *here*."""
    scenario = load_scenario(here / f"{load}.yaml")
    spec = scenario.replica_specs()[0]
    rebuild = StepRebuild(**rebuild_for(spec.scheduler, spec.kv_cache.block_size))
    steps = steps_of_runs(sorted((here / "real" / load).glob("run*")), rebuild)
    charged = charged_ms(scenario, steps)
    priced = ~np.isnan(charged)
    ratio = steps.latency_ms / np.where(priced, charged, 1.0)
    prompt = priced & (steps.prefill_seqs > 0) & (steps.steps == 1)
    decode = priced & (steps.prefill_seqs == 0)
    out = [f"{load}: decode {np.median(ratio[decode]):.3f} ({decode.sum()} steps), "
           f"prompt {np.median(ratio[prompt]):.3f} ({prompt.sum()} steps)"]  # fmt: skip
    groups: dict[tuple[int, int, str, int, int], list[int]] = {}
    for i in np.flatnonzero(prompt):
        key = (int(steps.decode_seqs[i]), int(steps.prefill_seqs[i]),
               tokens_bin(int(steps.prefill_tokens[i])), int(steps.passes[i]),
               int(steps.arrivals[i] > 0))  # fmt: skip
        groups.setdefault(key, []).append(int(i))
    for (dec, pre, tok, passes, arrived), idx in sorted(groups.items()):
        if len(idx) >= 3:
            out.append(f"  decoders {dec} prompts {pre} tokens {tok:>5} passes {passes} "
                       f"arrival {arrived}: {len(idx):3d} steps, {np.median(ratio[idx]):.3f} "
                       f"x ({np.median(steps.latency_ms[idx]):.1f} ms against "
                       f"{np.median(charged[idx]):.1f})")  # fmt: skip
    return out


def server_slots(log: Path) -> list[list[int]]:
    """The slots llama-server gave each run's requests, from its log (default verbosity):
    per run, the slots of its launches (``launch_slot_``) in the order the server
    launched them. A run is the launches chosen least recently used
    (``get_available_slot``: "selected slot by LRU") that follow a launch pinned by id —
    the ``lyra-simpy speed`` readings that :data:`~llamacpp_matrix.SPEED_BEFORE` takes
    right before every run; the probe after the run and the gate's probes before the
    next one are LRU launches too, so a run is cut to its request count by the caller."""
    import re

    choice = re.compile(r"get_availabl: id +\d+ \| task -1 \| selected slot by (id|LRU)")
    launch = re.compile(r"launch_slot_: id +(\d+) \| task \d+")
    runs: list[list[int]] = []
    how, pinned = "", False
    for line in log.read_text().splitlines():
        if m := choice.search(line):
            how = m[1]
        elif m := launch.search(line):
            if how == "id":
                pinned = True
            elif pinned:  # the first LRU launch after a pinned one starts a run
                runs.append([])
                pinned = False
            if how == "LRU" and runs:
                runs[-1].append(int(m[1]))
    return runs


def stored_point(here: Path) -> dict[str, Any] | None:
    """The stored result of the point in the folder *here* (``CFG_REGIME``) from the
    ``matrix.json`` beside it (None: none there), for the order its runs ran in."""
    matrix = here.parent / "matrix.json"
    if not matrix.is_file():
        return None
    got: dict[str, Any] | None = json.loads(matrix.read_text())["results"].get(point_key(here.name))
    return got


def runs_in_log(logged: list[list[int]], sizes: list[int]) -> list[list[int]]:
    """The runs' launches among :func:`server_slots`' stretches *logged*, for runs of
    *sizes* requests in the order they ran: the last run in the last stretch of at least
    its size, each run before it in the last such stretch before the next run's. The lone
    prompts ``lyra-simpy speed --prompt N`` times between two pinned readings before every
    run (item 71 on) make stretches of their own, a few launches long, and the profile's
    probes come before the first run."""
    out: list[list[int]] = []
    i = len(logged)
    for n in reversed(sizes):
        i -= 1
        while i >= 0 and len(logged[i]) < n:
            i -= 1
        if i < 0:
            raise SystemExit(
                f"--slots: the log holds {len(out)} stretches of launches as long as the "
                f"point's last {len(out)} runs, not one for each of its {len(sizes)}: the "
                "log is not this point's runs"
            )
        out.append(logged[i])
    return out[::-1]


def slots_against_log(here: Path) -> list[str]:
    """Every run of the point: the slots its requests got, read from the server's log
    (:func:`server_slots`, the runs in the order they ran), against the rebuild's replay
    (:func:`~lyra_simpy.calibration.llamacpp_runs.replay_slots`, as the engine model
    chooses: a server that never ran a request fills its highest slot first, and of slots
    released in one step the highest id goes first), in the order the server launched
    the requests (their first tokens' order): how many got the same slot, and how many
    the mirrored one (``n_parallel - 1 - slot``).
    A server whose slots were last released in id order — the speed readings' pinned
    batch, released in one step — fills them lowest first, and llama.cpp releases a
    step's finished slots in id order (``update_slots``), lowest first again: the mirror
    image of the replay, with the same runs of consecutive slot ids and so the same
    passes. Then closed 8's last run in full."""
    from lyra_simpy.calibration.llamacpp_runs import replay_slots
    from lyra_simpy.calibration.runs import StepRebuild
    from lyra_simpy.calibration.streams import read_run

    runs = runs_as_ran(here, stored_point(here))
    log = here / "llama-server.log"
    if not log.is_file():
        raise SystemExit(f"--slots: no {log} (the server's log, kept by validate_cpu.py)")
    logged = server_slots(log)
    if len(logged) < len(runs) or not runs:
        raise SystemExit(
            f"--slots: {log} holds {len(logged)} runs after a pinned speed reading, the point "
            f"{len(runs)} run folders: its runs need lyra-simpy speed before each "
            "(validate_cpu.py --matrix --speed-before)"
        )
    sent = [read_run(folder) for _, folder in runs]
    logged = runs_in_log(logged, [len(requests) for requests in sent])
    n = max(max(r, default=0) for r in logged) + 1
    out: list[str] = []
    for (load, folder), requests, real in zip(runs, sent, logged, strict=True):
        k = folder.name[3:]
        real = real[: len(requests)]
        replayed = replay_slots(requests, n, StepRebuild().sent_together_ms / 1000.0)
        order = sorted(range(len(requests)), key=lambda r: requests[r].chunk_s[0])
        again = [replayed[r] for r in order]
        same = sum(a == b for a, b in zip(real, again, strict=True))
        mirrored = sum(a == n - 1 - b for a, b in zip(real, again, strict=True))
        out.append(f"{load} run{k}: {len(real)} requests, same slot {same}, mirrored {mirrored}")
    out += [f"{load} run{k}'s slots, the server's: {real}", f"replayed: {again}"]
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2) or (len(args) == 2 and args[1] != "--slots"):
        raise SystemExit(
            "usage: llamacpp_prompt_shapes.py results/validation-llamacpp/CFG_REG [--slots]"
        )
    if len(args) == 2:
        print("\n".join(slots_against_log(Path(args[0]))))
        return 0
    for load in LOADS:
        print("\n".join(shapes(Path(args[0]), load)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
