"""``tox -e validate-vllm-cpu``: the simulator against a real vLLM V1 on this CPU (issue 21).

Scaffold, modelled on ``validate_cpu.py``: installs :data:`~lyra_simpy.live.vllm_cpu.PACKAGE`
into a cached environment, builds the tiny random-weight Llama, starts vLLM on 127.0.0.1
with :data:`SERVER_FLAGS` and ``VLLM_CPU_KVCACHE_SPACE`` = :data:`KV_SPACE_GIB`, then
through the ``lyra-simpy`` command line: profiles it, calibrates, and for every scenario
of :data:`SCENARIOS` (the llama.cpp workloads with vLLM's settings as ``--set``
overrides) simulates, replays :data:`REPEATS` times and compares; stops the server and
writes ``docs/VALIDATION-vllm.md`` (the comparison tables as ``lyra-simpy compare``
prints them). Not yet run end to end (the matrix of issue 21: chunked prefill, prefix
caching, preemption, is still to add).

Environment: ``LYRA_QUICK=1`` (each scenario's ``quick:`` block), ``LYRA_VALIDATE_REPEATS``
(default 3), ``LYRA_CACHE`` (where the environment and model live).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from lyra_simpy.cli import main as cli_main
from lyra_simpy.live import vllm_cpu
from lyra_simpy.live.compare import compare, format_comparison
from lyra_simpy.presets.vllm import cpu_kv_blocks

ROOT = Path(__file__).resolve().parents[1]
KV_SPACE_GIB = 2
MAX_NUM_SEQS = 8
SERVER_FLAGS = [
    "--max-model-len", "2048",
    "--dtype", "bfloat16",
    "--max-num-seqs", str(MAX_NUM_SEQS),
]  # fmt: skip
BLOCK_SIZE = 128  # vLLM's CPU default (presets/vllm.py)
SCENARIOS = ["poisson_light", "poisson_medium", "closed_loop_4", "closed_loop_8"]
PROFILE = "validation/profiles/vllm_cpu_tiny.csv"
FIT = "validation/fits/vllm_cpu_tiny.yaml"
GRID = "validation/profile_grid.yaml"


def overrides() -> list[str]:
    """``--set`` pairs that turn a llama.cpp validation scenario into this server's:
    the fitted cost, vLLM's CPU token budget and block size, the KV pool of
    ``VLLM_CPU_KVCACHE_SPACE`` GiB of the tiny model."""
    blocks = cpu_kv_blocks(KV_SPACE_GIB, BLOCK_SIZE, vllm_cpu.KV_BYTES_PER_TOKEN)
    pairs = {
        "cost.path": f"fits/{Path(FIT).name}",
        "scheduler.max_num_seqs": MAX_NUM_SEQS,
        "scheduler.max_num_batched_tokens": 2048,
        "kv_cache.block_size": BLOCK_SIZE,
        "kv_cache.num_blocks": blocks,
    }
    out: list[str] = []
    for key, value in pairs.items():
        out += ["--set", f"{key}={value}"]
    return out


def step(*args: str) -> None:
    """Run one ``lyra-simpy`` command in-process; stop the validation if it fails."""
    print("\n$ lyra-simpy " + " ".join(shlex.quote(a) for a in args), flush=True)
    code = cli_main(list(args))
    if code != 0:
        raise SystemExit(f"validate-vllm-cpu: `lyra-simpy {args[0]}` exited {code}")


def doc(tables: dict[str, str], launch: str, quick: bool, repeats: int) -> str:
    """``docs/VALIDATION-vllm.md``: how the server ran and each comparison table."""
    lines = [
        "# Validation against vLLM V1 on this CPU",
        "",
        "Written by `tox -e validate-vllm-cpu` (validation/validate_vllm_cpu.py); never by hand.",
        "",
        f"- server: `{launch}`",
        f"- package: `{vllm_cpu.PACKAGE}`; model: random-weight Llama {vllm_cpu.TINY}",
        f"- real runs per point: {repeats}" + (" (quick mode: a trial)" if quick else ""),
        "",
    ]
    for name, table in tables.items():
        lines += [f"## {name}", "", "```", table, "```", ""]
    return "\n".join(lines)


def main() -> int:
    os.chdir(ROOT)
    quick = os.environ.get("LYRA_QUICK") == "1"
    repeats = int(os.environ.get("LYRA_VALIDATE_REPEATS", "3"))
    out = ROOT / "results" / "validation-vllm"
    python = vllm_cpu.env_python()
    model = vllm_cpu.tiny_model(python)
    base = ["--quick"] if quick else []
    vocab = str(vllm_cpu.TINY["vocab_size"])
    tables: dict[str, str] = {}
    log = out / "vllm-server.log"
    with vllm_cpu.Server(python, model, SERVER_FLAGS, log, KV_SPACE_GIB) as srv:
        step("profile", "--endpoint", srv.url, "--out", PROFILE, "--grid", GRID,
             "--flags", srv.launch, "--vocab-size", vocab)  # fmt: skip
        step("calibrate", PROFILE, "--out", FIT)
        for name in SCENARIOS:
            path = f"validation/{name}.yaml"
            q = [*base, *overrides()]
            step("run", path, "--out", str(out / "sim"), "--no-figures", *q)
            reals = []
            for k in range(repeats):
                real = out / "real" / name / f"run{k + 1}"
                limits = ["--timeout-s", "120", "--time-limit-s", "900", "--vocab-size", vocab]
                step("replay", path, "--endpoint", srv.url, "--out", str(real), *limits, *q)
                reals.append(real)
            sims = [p for p in (out / "sim" / name).iterdir() if (p / "summary.json").is_file()]
            table = compare(sims[0], reals, None, out / f"{name}_compare.json")
            tables[name] = format_comparison(table)
        launch = srv.launch
    target = ROOT / "docs" / "VALIDATION-vllm.md"
    target.write_text(doc(tables, launch, quick, repeats))
    (out / "tables.json").write_text(json.dumps(tables, indent=1) + "\n")
    print(f"\nwrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
