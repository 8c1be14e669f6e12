"""Does the same vLLM server run at the same speed from one minute to the next?

``python validation/vllm_drift.py [--rounds 3] [--confine]`` starts the default server of
``validate_vllm_cpu.py`` and alternates, on that one server, a small profile (decode steps
at batch 1, 2 and 4 with 40 tokens of context) and one replay of the matrix's
``default/short`` ``poisson_0.3`` scenario (the prefix cache emptied first), printing the
probes' step times and the replay's median TPOT and ITL. Nothing changes between rounds
but the time. ``--confine`` first moves every thread of the server that vLLM did not pin
(the API server, the engine core's busy loop), and this process with its client, onto the
cores vLLM left to them (it pins its worker to the others), to tell host noise from the
server's own processes taking the worker's core. Needs ``tox -e validate-vllm-cpu`` (or
``validate_vllm_cpu.py``) to have run: it reads the scenario from
``results/validation-vllm``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vllm_points as matrix

from lyra_simpy.cli import main as cli
from lyra_simpy.live import vllm_cpu

GRID = {"prefill_tokens": [64], "decode_batch": [1, 2, 4], "decode_context": [40],
        "decode_steps": 16, "mixed_batch": [1], "mixed_prompt_tokens": [64],
        "mixed_context": 40, "repeats": 3}  # fmt: skip
SCENARIO = matrix.OUT / "default_short" / "poisson_0.3.yaml"


def descendants(root: int) -> list[int]:
    """*root* and every process below it (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def confine(root: int) -> set[int]:
    """Move the unpinned threads under *root*, and this process, off the pinned cores."""
    every = os.sched_getaffinity(0)
    tids = [int(t.name) for p in descendants(root) for t in Path(f"/proc/{p}/task").iterdir()]
    pinned: set[int] = set()
    for tid in tids:
        if os.sched_getaffinity(tid) != every:
            pinned |= os.sched_getaffinity(tid)
    rest = every - pinned or every
    for tid in tids:
        if os.sched_getaffinity(tid) == every:
            os.sched_setaffinity(tid, rest)
    os.sched_setaffinity(0, rest)
    return rest


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="vllm_drift.py")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--confine", action="store_true")
    args = parser.parse_args(argv)
    if not SCENARIO.is_file():
        print(f"vllm_drift.py: {SCENARIO} is missing: run validation/validate_vllm_cpu.py first")
        return 2
    python = vllm_cpu.env_python()
    model = vllm_cpu.tiny_model(python)
    vocab = str(vllm_cpu.TINY["vocab_size"])
    with tempfile.TemporaryDirectory(prefix="vllm_drift_") as tmp:
        out = Path(tmp)
        grid = out / "grid.yaml"
        grid.write_text(yaml.safe_dump(GRID))
        flags = matrix.launch_flags("default")
        with vllm_cpu.Server(python, model, flags, out / "log", matrix.KV_SPACE_GIB,
                             dev_mode=True) as srv:  # fmt: skip
            assert srv._proc is not None
            if args.confine:
                print(f"confined to cores {sorted(confine(srv._proc.pid))}", flush=True)
            for k in range(args.rounds):
                csv = out / f"p{k}.csv"
                cli(["profile", "--endpoint", srv.url, "--out", str(csv), "--grid", str(grid),
                     "--vocab-size", vocab])  # fmt: skip
                rows = [
                    r.split(",") for r in csv.read_text().splitlines() if r.startswith("decode")
                ]
                vllm_cpu.reset_prefix_cache(srv.url)
                cli(["replay", str(SCENARIO), "--endpoint", srv.url, "--out", str(out / f"r{k}"),
                     "--vocab-size", vocab])  # fmt: skip
                s = json.loads((out / f"r{k}" / "summary.json").read_text())
                steps = ", ".join(f"batch {r[1]} {float(r[4]):.1f} ms" for r in rows)
                print(f"ROUND {k + 1}: probes {steps}; replay median TPOT "
                      f"{s['median_tpot_ms']:.1f} ms, ITL {s['median_itl_ms']:.1f} ms",
                      flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
