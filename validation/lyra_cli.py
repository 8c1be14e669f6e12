"""``lyra-simpy`` as the validation scripts take it: each command run in this process and
logged as a user would type it (the documents list them), and the run folder a scenario
without variants got from ``lyra-simpy run``. Shared by ``validate_cpu.py``, the llama.cpp matrix
(``llamacpp_*.py``) and ``validate_vllm_cpu.py``."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from lyra_simpy.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
"""The repository: paths under it are logged relative to it, as a user types them from
the clone's root (the documents quote the logs; a clone's own path is no one else's)."""


def _script() -> str:
    """The running script's name, for the line a failure stops it with."""
    return Path(sys.argv[0]).stem or "validation"


def run(*args: str, log: list[str], ok: tuple[int, ...] = (0,), url: str | None = None) -> None:
    """``lyra-simpy ARGS`` in this process, the command appended to *log* and printed
    (paths under :data:`ROOT` relative to it; *url*, where given, written ``$URL``: a
    server's port changes run to run); an exit code outside *ok* stops the script with one
    line naming the command."""
    shown = " ".join(shlex.quote(a) for a in args).replace(f"{ROOT}/", "")
    if url:
        shown = shown.replace(url, "$URL")
    log.append(f"lyra-simpy {shown}")
    print(f"\n$ {log[-1]}", flush=True)
    code = cli_main(list(args))
    if code not in ok:
        raise SystemExit(f"{_script()}: `lyra-simpy {args[0]}` exited {code}")


def sim_folder(folder: Path) -> Path:
    """The one run folder (the one holding ``summary.json``) in *folder*, the scenario's
    folder ``OUT/NAME`` that ``lyra-simpy run --out OUT`` writes, for a scenario without
    variants; anything else stops the script."""
    found = [p for p in Path(folder).iterdir() if (p / "summary.json").is_file()]
    if len(found) != 1:
        raise SystemExit(f"{_script()}: expected one run in {folder}, found {len(found)}")
    return found[0]
