"""The llama.cpp validation matrix's definition, shared by every tool that reads it
(:mod:`llamacpp_matrix` runs it, :mod:`llamacpp_tables` redoes its tables from stored
runs, :mod:`llamacpp_report` writes its document; :mod:`llamacpp_at_speed`,
:mod:`llamacpp_noise` and the other studies read its points): the server configurations
× length regimes × loads, the metrics and the target each cell is held to, where the
results go, and the scenario each load is simulated with."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lyra_simpy.calibration.fitfile import load_fit
from lyra_simpy.calibration.profiles import request_path_ms
from lyra_simpy.calibration.wakefit import WakeFit

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "validation-llamacpp"
DOC = ROOT / "docs" / "VALIDATION-llamacpp.md"
"""Where the tables go (between :data:`START` and :data:`END`; the rest of the file, the
reading of the tables, is written by hand and kept)."""
PUBLISHED = ROOT / "docs" / "validation" / "llamacpp-matrix.json"
"""A copy of ``matrix.json`` kept with the document (``--doc-only`` reads it in a clone
without the run's results)."""
CONFIGS: dict[str, list[str]] = {
    "default": ["-np", "4", "-c", "4096", "-t", "2"],
    "kvu": ["-np", "4", "-c", "4096", "-t", "2", "-kvu"],
    "np2_b64": ["-np", "2", "-c", "4096", "-t", "2", "-b", "64"],
}
"""Launch flags beyond ``-m``/``--host``/``--port``: per-slot KV and context checkpoints
on (llama.cpp's defaults once ``-np`` is given); one unified KV buffer; fewer slots and a
logical batch that chunks the longer prompts."""
REGIMES: dict[str, dict[str, Any]] = {
    "short": {"input": (16, 64), "output": (8, 32), "requests": 40, "quick": 16},
    "long": {"input": (200, 400), "output": (80, 120), "requests": 24, "quick": 10},
}
LOADS = {
    "poisson_0.3": 0.3,
    "poisson_0.6": 0.6,
    "poisson_0.9": 0.9,
    "closed_4": 4,
    "closed_8": 8,
}
FIT_LOAD = "poisson_0.6"
"""The load whose real runs Table 2 calibrates on."""
REPEATS = int(os.environ.get("LYRA_VALIDATE_REPEATS", "3"))
EXTRA_BODY = '{"cache_prompt": false}'
METRICS = (
    "output_throughput",
    "median_ttft_ms",
    "median_tpot_ms",
    "median_e2el_ms",
    "p90_ttft_ms",
    "p90_tpot_ms",
    "p90_e2el_ms",
)


REQUEST_PATH_CPU_SHARE = 1.0
"""``workload.request_path_cpu_share`` of Table 1's scenarios: llama-server runs ``-t 2``
on this host's 2 cores beside its HTTP threads and the replay client, so all of a request's
path (the profile's ``request_path_ms``) is work taken from the engine's cores, charged
to the iteration it lands in (item 18). Not fitted: the path is the profile's measure and
the share its upper end, what the host's core count gives."""

KV_KIB_PER_CELL = 18.0
"""Gemma 3 270M's K and V of one cell over its layers (``scheduler.kv_kib_per_cell``):
18 layers × one KV head × (256 + 256) × 2 bytes (f16) = 18 KiB; a 400-token state with
its checkpoint comes to 12.82 MiB by it, where the matrix's logs say 12.847 (item 87)."""
CACHE_RAM_MIB = 8192
"""llama-server's ``--cache-ram`` default, which every configuration keeps."""
FILL_TOKENS = 512
"""``--fill``'s prompts (``grid.save_fill_tokens``): about the sliding window, where a
prompt's state and checkpoint are the most bytes per prompt token."""


def fill_prompts() -> int:
    """``--fill``'s prompts (``grid.save_fill_prompts``): :data:`CACHE_RAM_MIB` over one
    :data:`FILL_TOKENS` prompt's state (its checkpoint 4 tokens before its end), plus a
    tenth."""
    from lyra_simpy.policies import LlamaCppConfig

    c = LlamaCppConfig(sliding_window=True, kv_kib_per_cell=KV_KIB_PER_CELL)
    kib = c.state_kib(FILL_TOKENS, c.checkpoint_kib(FILL_TOKENS - 4))
    return -(-int(1.1 * CACHE_RAM_MIB * 1024) // int(kib))


def filled(fit: str) -> bool:
    """The fit file at *fit* holds the prompt-cache probe taken again on a full cache
    (the point ran with ``--fill``): the profile left the server's cache full, so Table
    1's scenarios start full and price each save by the memory it copies into (item 87)."""
    path = Path(fit)
    save = load_fit(path).prompt_save if path.is_file() else None
    return save is not None and save.reused_ms_per_token is not None


def scenario(name: str, flags: list[str], regime: dict[str, Any], quick: bool, fit: str,
             load: str, capacity: float | None) -> dict[str, Any]:  # fmt: skip
    """The scenario of one point (the preset reads the launch flags), with the request
    path its profile (``profile.csv`` beside *fit*) measured (0 for the profiles taken
    before it was; :func:`~lyra_simpy.calibration.profiles.request_path_ms`). It is
    written beside *fit* and names it by its file name, which a scenario reads from its
    own folder: a point's folder copied to another checkout (or run from a worktree)
    is priced by its own fits, not by those of the place it ran (item 43: stored with
    the absolute path, ``--resimulate`` and ``--steps-check`` there priced the old
    place's fit without a word)."""
    value = LOADS[load]
    if load.startswith("closed"):
        arrival: dict[str, Any] = {"name": "closed_loop", "concurrency": int(value),
                                   "think_time_s": 0.005}  # fmt: skip
    else:
        assert capacity is not None
        arrival = {"name": "poisson", "rate_per_s": round(value * capacity, 4)}
    lo, hi = regime["input"]
    olo, ohi = regime["output"]
    path_ms = request_path_ms(Path(fit).parent / "profile.csv")
    return {
        "name": name,
        "description": f"llama-server {' '.join(flags)}: {load}",
        "seed": 11,
        "engine": {"name": "llamacpp", "command": "llama-server " + " ".join(flags)},
        "workload": {
            "num_requests": regime["quick" if quick else "requests"],
            "arrival": arrival,
            "input_tokens": {"name": "uniform", "low": lo, "high": hi},
            "output_tokens": {"name": "uniform", "low": olo, "high": ohi},
            "request_path_ms": path_ms,
            "request_path_cpu_share": REQUEST_PATH_CPU_SHARE if path_ms else 0.0,
        },
        # Gemma 3 has sliding-window layers (llama.cpp checkpoints its prompts) and a
        # 32768-token training context; cache_prompt: false is what the replay sends
        "scheduler": {
            "name": "llamacpp",
            "sliding_window": True,
            "cache_prompt": False,
            **(
                {"kv_kib_per_cell": KV_KIB_PER_CELL, "prompt_cache_start_mib": CACHE_RAM_MIB}
                if filled(fit)
                else {}
            ),
        },
        "cost": {
            "name": "profile",
            "path": Path(fit).name,
            "decode_table": True,
            **({"wake": "fitted"} if has_wake(fit) else {}),
        },
    }


def fit_wake(fit: Path) -> WakeFit | None:
    """The profile's wake after idle (``grid.wake_gaps_s``,
    :data:`llamacpp_matrix.WAKE_GAPS_S`; item 33) the fit file at *fit* holds (None: no
    such file, or no wake in it)."""
    return load_fit(fit).wake if fit.is_file() else None


def has_wake(fit: str) -> bool:
    """The fit file at *fit* holds a wake: Table 1 charges it (``cost.wake: fitted``)."""
    return fit_wake(Path(fit)) is not None


def prompt_seed(load: str, run: str) -> int:
    """The prompt ids' seed of real run *run* (``runK``) of *load* (``replay
    --prompt-seed``): every run of a point its own prompts, so that none meets
    llama-server's prompt cache in RAM holding its prompts from the runs before, as a
    user's fresh load does not (item 84: with the same ids every run after a point's first
    had its requests' old states restored at each launch, which freed the memory its saves
    then reused at about a tenth of the fresh price). ``1000 × (the load's place) + K``."""
    return 1000 * (list(LOADS).index(load) + 1) + int(run.removeprefix("run"))


def point_folder(key: str, out: Path) -> Path:
    """Point *key*'s (``CFG/REGIME``) folder in *out* (:data:`OUT`): ``CFG_REGIME``, where
    ``validate_cpu.py --matrix`` leaves its profile, real runs and simulations."""
    return out / key.replace("/", "_")


def point_key(name: str) -> str:
    """The key (``CFG/REGIME``) of the point whose folder is *name* (``CFG_REGIME``; a
    CFG such as ``np2_b64`` holds ``_`` itself, a REGIME does not)."""
    cfg, regime = name.rsplit("_", 1)
    return f"{cfg}/{regime}"


def runs_here(out: Path, key: str) -> bool:
    """Whether point *key*'s profile and real runs are in *out* (:data:`OUT`; they stay on
    the machine that ran them, or come back from ``llamacpp_store.py unpack``)."""
    folder = point_folder(key, out)
    return (folder / "profile.csv").is_file() and (folder / "real").is_dir()


def real_runs(here: Path, load: str, repeats: int) -> list[str]:
    """The folders of a point's real runs of *load* (``real/LOAD/runK``)."""
    return [str(here / "real" / load / f"run{k}") for k in range(1, repeats + 1)]


def run_order(res: dict[str, Any]) -> list[tuple[str, int]]:
    """The stored point *res*'s real runs in the order they ran, each as its load and its
    place in that load's ``machine`` list (run *k* + 1): the matrix's ``run_order`` where
    it kept one (round by round since item 86: every load's first run, then every load's
    second, ...), else the loads of :data:`LOADS` in turn, each load's runs one after
    another (the order before item 86)."""
    kept = res.get("run_order")
    if kept is not None:
        return [(str(load), int(k)) for load, k in kept]
    return [(load, k) for load in LOADS for k in range(len(res["loads"][load]["machine"]))]


def point_repeats(res: dict[str, Any], default: int) -> int:
    """The real runs a load of the stored point *res* ran: from its ``run_order`` where it
    kept one (a point run again with ``LYRA_VALIDATE_REPEATS`` other than the matrix's),
    else *default*, the matrix's ``facts.repeats``."""
    kept = res.get("run_order")
    return len(kept) // len(LOADS) if kept else default


def rounds(repeats: int) -> list[tuple[str, int]]:
    """The order the matrix runs a point's real runs in since item 86: round by round,
    each load's run *k* in the order of :data:`LOADS` before any load's run *k* + 1, so
    that a slow spell of the host falls on one run of several loads, not on every run of
    one (:func:`run_order`)."""
    return [(load, k) for k in range(repeats) for load in LOADS]


def run_rounds(repeats: int, one: Callable[[str, int], dict[str, Any]]
               ) -> tuple[list[tuple[str, int]], dict[str, list[dict[str, Any]]]]:  # fmt: skip
    """A point's real runs in :func:`rounds`' order, ``one(load, k)`` running load's run
    *k* + 1 and giving its record: the order they ran and each load's records in the
    order of its runs."""
    order = rounds(repeats)
    machines: dict[str, list[dict[str, Any]]] = {load: [] for load in LOADS}
    for load, k in order:
        machines[load].append(one(load, k))
    return order, machines


def every_run(here: Path, load: str) -> list[Path]:
    """Every real run of *load* the point in *here* holds, in the order they ran: the
    matrix's (``real/LOAD/runK``) and a floor's beyond them (``floor/LOAD/runK``,
    ``llamacpp_floor.py``)."""
    found = [*(here / "real" / load).glob("run*"), *(here / "floor" / load).glob("run*")]
    return sorted(found, key=lambda p: int(p.name[3:]))


def runs_as_ran(here: Path, res: dict[str, Any] | None) -> list[tuple[str, Path]]:
    """Every real run the point in *here* holds, as (load, folder), in the order they ran:
    the matrix's in the stored point *res*'s :func:`run_order` where it kept one, else
    (and with *res* None) each load's in turn; then a floor's (``llamacpp_floor.py``, run
    after the matrix, each load's in turn)."""
    if res is None or "run_order" not in res:
        return [(load, run) for load in LOADS for run in every_run(here, load)]
    got = [(load, here / "real" / load / f"run{k + 1}") for load, k in run_order(res)]
    return got + [(load, run) for load in LOADS for run in every_run(here, load)
                  if run.parent.parent.name == "floor"]  # fmt: skip


START, END = "<!-- llamacpp-matrix:start -->", "<!-- llamacpp-matrix:end -->"
"""The markers in :data:`DOC` between which :mod:`llamacpp_report` writes the tables."""


def _pct(x: float) -> str:
    return f"{100 * x:+.1f} %"


def cell(row: dict[str, Any]) -> tuple[str, bool]:
    """The cell for one metric and whether it meets the target: throughput within 5 %;
    p50s within 10 % or the real spread, whichever is wider; p90s within the spread."""
    err, spread, name = row["error"], row["spread"], row["metric"]
    if name == "output_throughput":
        ok = abs(err) <= 0.05
    elif name.startswith("median"):
        ok = abs(err) <= max(0.10, spread)
    else:
        ok = abs(err) <= spread
    return f"{_pct(err)} (±{100 * spread:.0f} %){'' if ok else ' ✗'}", ok


def in_target(table: list[dict[str, Any]]) -> dict[str, bool]:
    """Each of :data:`METRICS`' cells of a ``compare`` table: inside the target
    (:func:`cell`'s rule)."""
    by = {r["metric"]: r for r in table}
    return {m: cell(by[m])[1] for m in METRICS}


def p50_errors(table: list[dict[str, Any]]) -> list[float]:
    """The |error| of a ``compare`` table's p50 cells among :data:`METRICS`, in order."""
    by = {r["metric"]: r for r in table}
    return [abs(by[m]["error"]) for m in METRICS if m.startswith("median")]
