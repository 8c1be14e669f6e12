"""Where do the prompt-speed bands come from? llama-bench's prompt, with the engine's two
threads and with one thread on each core, beside probes of the cores themselves.

Issue 12, item 81: at ``-np 4`` long the beside reading (a lone 400-token prompt) fell
in two bands 9 % apart that lasted minutes, and a standalone ``llama-bench -p 400 -n 0
-t 2`` showed the same two bands, so they are not the server's state. This script asks
which part of the host they come from.

``python validation/llamacpp_bands.py record [--minutes 25] [--out FILE]`` builds
``llama-bench`` beside the ``llama-server`` that ``validate_cpu.py`` builds (same commit,
same flags, same build folder; a few seconds once the server is built), then runs rounds
until the time is up. Each round, in this order (``PROBES``):

- ``pair``: ``llama-bench -p 400 -n 0 -t 2 -r 3`` — the beside reading's prompt on the
  engine's two threads;
- ``strict``: the same with ``--cpu-strict 1`` (ggml pins its threads, one per core);
- ``core0`` / ``core1``: the same prompt on one thread (``-t 1``) under ``taskset -c 0``
  / ``-c 1``;
- ``decode``: ``-p 0 -n 32 -t 2 -r 3`` (per token);
- ``alone0`` / ``alone1``: a fixed in-cache matrix-multiply loop (numpy, one BLAS thread)
  pinned to core 0 / 1 with the other core idle;
- ``both0`` / ``both1``: the two loops at once, one on each core;
- ``memory``: copying a 256 MiB array on core 0 (bandwidth beyond the caches).

Each llama-bench probe keeps the median of its repeats in ms a token (the prompt's time
over its 400 tokens, decode's over its 32); each loop its seconds. The round's start
(UTC) and the guest's steal time over it (``/proc/stat``) are kept too, and the file
names the host (:func:`host_facts`). Keep the CPU otherwise quiet while it records.

``record --tight`` instead runs rounds of three one-repeat prompts back to back, a few
seconds in all: ``core0``, ``pair``, ``core1`` (:func:`tight_round`), each with its
wall time and each core's steal over it, so that the pair's gain from its second thread
is read against one-thread prompts seconds away and its time against the time the host
took its cores away. ``facts [--seconds 20] [--out FILE]`` writes the CPU's facts and
``host_noise.py``'s reading of the host (20 s of it).

``watch CFG/REGIME [--minutes 15]`` takes a matrix point's own beside reading (``lyra-simpy
speed PROFILE --prompt N --beside NP-1``, one probe at a time) again and again against a
llama-server launched with the point's flags (:func:`watch`; the point unpacked first:
``python validation/llamacpp_store.py unpack CFG/REGIME``), and ``report`` prints how far
a reading forecast the next ones.

``python validation/llamacpp_bands.py report FILE`` (no engine) splits the rounds at the
``pair`` reading's two-means threshold (the split that leaves the least spread within the
two groups) and prints, for every probe, the median of the slow band's rounds over the
quick band's and the probe's rank correlation with ``pair`` over all rounds, then how the
bands follow one another in time. What each cause predicts: the host's clock moves every
probe alike; a core shared with a neighbour (or its hyper-thread sibling busy) moves that
core's ``core`` and ``alone`` probes; the two virtual cores put on one physical core's two
hyper-threads move ``both`` over ``alone`` (and ``pair``) but neither core alone;
memory placed far away moves ``memory`` and ``decode`` more than the in-cache loops.
For a ``--tight`` file it also prints, per probe, the steal over it (:func:`steal`):
ggml's threads meet at a barrier after every operation of a pass
(``ggml/src/ggml-cpu/ggml-cpu.c``, ``ggml_graph_compute_thread`` → ``ggml_barrier``),
so a moment the host takes one core away holds up the other thread too.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

OUT = ROOT / "results" / "llamacpp-bands" / "bands.json"
PUBLISHED = ROOT / "docs" / "validation" / "llamacpp-matrix.json"
PROMPT = 400
"""The beside reading's prompt length (``speed_reference_beside: [3, 400]``)."""
REPEATS = 3
PROBES = (
    "pair",
    "strict",
    "core0",
    "core1",
    "decode",
    "alone0",
    "alone1",
    "both0",
    "both1",
    "memory",
)
TIGHT = ("core0", "pair", "core1")
"""A ``--tight`` round's probes, in order (:func:`tight_round`)."""
LOOP = """
import time
import numpy as np
a = np.random.default_rng(0).random((128, 128))
b = a.copy()
for _ in range(20):
    a @ b
t = time.perf_counter()
for _ in range(2500):
    a @ b
print(time.perf_counter() - t)
"""
"""The in-cache loop: 2500 products of two 128 × 128 float64 matrices (384 KiB in all),
after 20 to warm up."""
MEMORY = """
import time
import numpy as np
src = np.ones(32 * 1024 * 1024)
dst = np.empty_like(src)
best = float("inf")
for _ in range(4):
    t = time.perf_counter()
    np.copyto(dst, src)
    best = min(best, time.perf_counter() - t)
print(best)
"""
"""The memory probe: the quickest of four copies of 256 MiB."""
ONE_THREAD = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


def host_facts() -> dict[str, Any]:
    """What ``/proc/cpuinfo`` says of this machine: the CPU's name, the core count and
    whether it has the AVX2 and AVX-512 units ggml's CPU kernels use when built for the
    host (``GGML_NATIVE``)."""
    from lyra_simpy.machine import cpu_flags, cpu_model

    flags = cpu_flags()
    return {
        "cpu": cpu_model() or "",
        "cores": os.cpu_count(),
        "avx2": "avx2" in flags,
        "avx512f": "avx512f" in flags,
    }


def bench_binary() -> Path:
    """``llama-bench``, built into validate-cpu's llama.cpp build folder if missing."""
    from lyra_simpy.live.llamacpp import server_binary

    server = server_binary()
    bench = server.parent / "llama-bench"
    if not bench.is_file():
        build = server.parent.parent
        subprocess.run(
            ["cmake", "--build", str(build), "--target", "llama-bench", "-j", "2"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return bench


def _bench(bench: Path, model: Path, args: list[str], core: int | None = None) -> float:
    """The median of llama-bench's repeats in ms a token (the prompt's or the generated
    tokens')."""
    repeats = [] if "-r" in args else ["-r", str(REPEATS)]
    cmd = [str(bench), "-m", str(model), *repeats, "-o", "json", *args]
    if core is not None:
        cmd = ["taskset", "-c", str(core), *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    row = json.loads(done.stdout)[0]
    per = row["n_prompt"] or row["n_gen"]
    return float(np.median(row["samples_ns"])) / 1e6 / per


def _python(code: str, core: int) -> subprocess.Popen[str]:
    env = {**os.environ, **ONE_THREAD}
    return subprocess.Popen(
        ["taskset", "-c", str(core), sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def _seconds(proc: subprocess.Popen[str]) -> float:
    out, _ = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"probe exited {proc.returncode}")
    return float(out.strip())


def _steal_by_core() -> list[int]:
    """Each core's steal time so far, in clock ticks (``/proc/stat``'s cpuN lines)."""
    out = []
    for line in Path("/proc/stat").read_text().splitlines()[1:]:
        fields = line.split()
        if not fields or not fields[0].startswith("cpu"):
            break
        out.append(int(fields[8]) if len(fields) > 8 else 0)
    return out


def _steal() -> int:
    """The guest's steal time so far over all cores, in clock ticks."""
    return sum(_steal_by_core())


def _timed(run: Callable[[], float]) -> tuple[float, float, list[int]]:
    """*run*'s result, its wall seconds and each core's steal ticks over it."""
    s0, t0 = _steal_by_core(), time.perf_counter()
    got = run()
    wall, s1 = time.perf_counter() - t0, _steal_by_core()
    return got, wall, [b - a for a, b in zip(s0, s1, strict=False)]


def tight_round(bench: Path, model: Path) -> dict[str, Any]:
    """One prompt on core 0's one thread, one on the pair, one on core 1's, back to
    back (``-r 1`` each, a few seconds in all), each with its wall time and each core's
    steal over it."""
    prompt = ["-p", str(PROMPT), "-n", "0", "-r", "1"]
    got: dict[str, Any] = {"utc": _utc()}
    runs = {
        "core0": lambda: _bench(bench, model, [*prompt, "-t", "1"], core=0),
        "pair": lambda: _bench(bench, model, [*prompt, "-t", "2"]),
        "core1": lambda: _bench(bench, model, [*prompt, "-t", "1"], core=1),
    }
    for name, run in runs.items():
        got[name], got[f"{name}_wall_s"], got[f"{name}_steal"] = _timed(run)
    return got


def one_round(bench: Path, model: Path) -> dict[str, Any]:
    """Every probe once, in ``PROBES`` order."""
    got: dict[str, Any] = {"utc": _utc()}
    steal = _steal()
    prompt = ["-p", str(PROMPT), "-n", "0"]
    got["pair"] = _bench(bench, model, [*prompt, "-t", "2"])
    got["strict"] = _bench(bench, model, [*prompt, "-t", "2", "--cpu-strict", "1"])
    got["core0"] = _bench(bench, model, [*prompt, "-t", "1"], core=0)
    got["core1"] = _bench(bench, model, [*prompt, "-t", "1"], core=1)
    got["decode"] = _bench(bench, model, ["-p", "0", "-n", "32", "-t", "2"])
    got["alone0"] = _seconds(_python(LOOP, 0))
    got["alone1"] = _seconds(_python(LOOP, 1))
    pair = [_python(LOOP, 0), _python(LOOP, 1)]
    got["both0"], got["both1"] = (_seconds(p) for p in pair)
    got["memory"] = _seconds(_python(MEMORY, 0))
    got["steal_ticks"] = _steal() - steal
    return got


def record(minutes: float, out: Path, tight: bool = False) -> dict[str, Any]:
    """Rounds (:func:`one_round`, or :func:`tight_round` with *tight*) until *minutes*
    have passed; written to *out* after every round (the file says ``"finished": null``
    until the last)."""
    from lyra_simpy.live.llamacpp import COMMIT, model_file

    bench = bench_binary()
    model = model_file()
    if shutil.which("taskset") is None:
        raise SystemExit("taskset not found: install util-linux")
    doc: dict[str, Any] = {
        "what": "llamacpp_bands.py record" + (" --tight" if tight else ""),
        "llama_cpp": COMMIT,
        "model": model.name,
        "prompt": PROMPT,
        "repeats": 1 if tight else REPEATS,
        "host": host_facts(),
        "probes": list(TIGHT if tight else PROBES),
        "rounds": [],
        "finished": None,
    }

    def take() -> str:
        r = (tight_round if tight else one_round)(bench, model)
        doc["rounds"].append(r)
        return f"pair {r['pair']:.2f} ms a token  core0 {r['core0']:.2f}  core1 {r['core1']:.2f}"

    return _rounds(doc, out, minutes, take)


def _utc() -> str:
    """Now, as the files write it (UTC, to the second)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _rounds(
    doc: dict[str, Any], out: Path, minutes: float, take: Callable[[], str]
) -> dict[str, Any]:
    """*take* (which adds one round to *doc* and says what it read) again and again until
    *minutes* have passed, *doc* written to *out* after every round and once more with
    its ``finished`` time after the last (until then the file says ``null``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    end = time.monotonic() + minutes * 60
    while time.monotonic() < end:
        said = take()
        print(f"{doc['rounds'][-1]['utc']}  {said}", flush=True)
        _write(out, doc)
    doc["finished"] = _utc()
    _write(out, doc)
    return doc


def watch(key: str, minutes: float, out: Path) -> dict[str, Any]:
    """The beside reading a matrix point takes before each run (``lyra-simpy speed
    PROFILE --prompt N --beside NP-1``, against the point's stored profile), one probe at
    a time, again and again for *minutes* against a llama-server launched with the point's
    flags: each round's ``beside`` is the reading's ``speed`` (the prompt's time over the
    profile's reference), written to *out* after every round like :func:`record`'s. The
    point's folder must be there (``python validation/llamacpp_store.py unpack POINT``);
    its profile may come from another host, for what counts is how the reading moves."""
    import contextlib
    import io

    from llamacpp_matrix import reading_beside_tokens
    from llamacpp_points import CONFIGS, OUT, point_folder

    from lyra_simpy.cli import main as cli_main
    from lyra_simpy.live import llamacpp

    cfg = key.split("/")[0]
    if cfg not in CONFIGS:
        raise SystemExit(f"point: {key!r} is not CFG/REGIME with CFG in {list(CONFIGS)}")
    here = point_folder(key, OUT)
    profile = here / "profile.csv"
    if not profile.is_file():
        raise SystemExit(
            f"point: {key}: no profile in {here} (python validation/llamacpp_store.py unpack {key})"
        )
    flags = CONFIGS[cfg]
    beside = int(flags[flags.index("-np") + 1]) - 1
    tokens = reading_beside_tokens(profile, beside)
    if tokens is None:
        raise SystemExit(f"point: {key}: its profile has no mixed row beside {beside}")
    doc: dict[str, Any] = {
        "what": f"llamacpp_bands.py watch {key}",
        "llama_cpp": llamacpp.COMMIT,
        "flags": flags,
        "prompt": tokens,
        "beside": beside,
        "host": host_facts(),
        "probes": ["beside"],
        "rounds": [],
        "finished": None,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    reading = out.with_suffix(".reading.json")
    server_log = out.with_suffix(".server.log")
    with llamacpp.Server(llamacpp.server_binary(), llamacpp.model_file(), flags, server_log) as srv:
        args = [str(profile), "--endpoint", srv.url, "--grid", str(here / "grid.yaml")]
        args += ["--prompt", str(tokens), "--beside", str(beside), "--probes", "1"]
        args += ["--pause-s", "0.1", "--json", str(reading)]

        def take() -> str:
            utc = _utc()
            reading.unlink(missing_ok=True)
            with contextlib.redirect_stdout(io.StringIO()):
                code = cli_main(["speed", *args])
            if code not in (0, 1, 2) or not reading.is_file():
                raise SystemExit(f"lyra-simpy speed exited {code} (server log: {server_log})")
            got = json.loads(reading.read_text())
            doc["rounds"].append({"utc": utc, "beside": got["speed"], "steps_ms": got["steps_ms"]})
            return f"beside {got['speed']:.3f}"

        _rounds(doc, out, minutes, take)
    reading.unlink(missing_ok=True)
    return doc


def _write(out: Path, doc: dict[str, Any]) -> None:
    """*doc* as *out*, whole or not at all (:func:`~lyra_simpy.metrics.io.atomic_write`)."""
    from lyra_simpy.metrics.io import atomic_write

    atomic_write(out, lambda tmp: tmp.write_text(json.dumps(doc, indent=1) + "\n"))


def split(values: list[float]) -> float:
    """The two-means threshold of *values*: the cut between two sorted neighbours that
    leaves the least summed squared spread within the two sides."""
    x = np.sort(np.asarray(values, float))
    if len(x) < 4:
        raise ValueError("need at least 4 rounds to split into bands")
    best, cut = np.inf, float(x[0])
    for i in range(2, len(x) - 1):
        lo, hi = x[:i], x[i:]
        spread = ((lo - lo.mean()) ** 2).sum() + ((hi - hi.mean()) ** 2).sum()
        if spread < best:
            best, cut = spread, float((x[i - 1] + x[i]) / 2)
    return cut


def bimodality(values: list[float]) -> float:
    """Sarle's bimodality coefficient of *values*, (g² + 1) / (k + 3(n − 1)² / ((n − 2)(n
    − 3))) with *g* the sample skewness and *k* the excess kurtosis (both bias-corrected):
    about 1/3 for a normal spread, 5/9 for a flat one in the limit (fewer values read
    lower: :func:`flat_bimodality`), towards 1 for two separate groups; above a flat
    spread's it points to two modes (or to a few strays on one side, which skew it). A
    two-means split (:func:`split`) of a flat spread leaves its halves 3.5 of their own
    standard deviations apart, of a normal one 2.6: the split alone does not show two
    bands."""
    from scipy.stats import kurtosis, skew

    x = np.asarray(values, float)
    n = len(x)
    if n < 4:
        raise ValueError("need at least 4 values for the bimodality coefficient")
    g = float(skew(x, bias=False))
    k = float(kurtosis(x, bias=False))
    return (g * g + 1) / (k + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3)))


def flat_bimodality(n: int) -> float:
    """:func:`bimodality` of *n* evenly spaced values: what a flat spread of as many
    reads (15: 0.39, 43: 0.49, 66: 0.52; 5/9 in the limit)."""
    return bimodality(list(np.linspace(0.0, 1.0, n)))


def _spread(v: np.ndarray) -> float:
    """The 90th percentile of *v* over its 10th."""
    p10, p90 = np.percentile(v, [10, 90])
    return round(float(p90 / p10), 3)


def _rank_corr(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's rank correlation (tied values share their mean rank); ``None`` where
    either side never moves."""
    from scipy.stats import rankdata

    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return round(float(np.corrcoef(rankdata(a), rankdata(b))[0, 1]), 3)


def bands(doc: dict[str, Any]) -> dict[str, Any]:
    """The ``pair`` reading's two bands and every probe against them: ``cut`` (ms),
    ``slow``/``quick`` (rounds in each), ``levels`` (the two bands' median pair reading),
    ``separation`` (the gap between the bands' means over the pooled within-band standard
    deviation: a flat spread split so reads 3.5, a normal one 2.6, so it does not show two
    bands), ``bimodality`` (:func:`bimodality`, which does) beside ``flat`` (what a flat
    spread of as many reads) and ``spread`` (p90/p10), per probe ``ratio`` (median in the slow
    band over median in the quick band), ``rank_corr`` with ``pair`` and ``spread``, two series made
    from the probes — ``both_over_alone`` (per round, the slower of the two loops run at
    once over the slower run alone: 1 where the two cores run side by side, 2 where they
    take turns on one) and ``speedup`` (the two one-thread prompts' mean over the pair's:
    2 where the second thread halves the prompt) — and the rank correlation of those two
    (``speedup_vs_contention``), ``spells`` (the lengths, in rounds, of the runs of
    consecutive rounds in one band) and the guest's steal time over all rounds."""
    rounds = doc["rounds"]
    pair = np.array([r["pair"] for r in rounds])
    cut = split(list(pair))
    slow = pair > cut
    lo, hi = pair[~slow], pair[slow]
    pooled = np.sqrt((((lo - lo.mean()) ** 2).sum() + ((hi - hi.mean()) ** 2).sum()) / len(pair))
    speedup = np.array([(r["core0"] + r["core1"]) / 2 / r["pair"] for r in rounds])
    derived = {"speedup": speedup}
    contend = None
    if "both0" in rounds[0]:
        contend = np.array(
            [max(r["both0"], r["both1"]) / max(r["alone0"], r["alone1"]) for r in rounds]
        )
        derived = {"both_over_alone": contend, **derived}
    probes: dict[str, dict[str, Any]] = {}
    for name in [p for p in doc["probes"] if p != "pair"] + list(derived):
        v = derived[name] if name in derived else np.array([r[name] for r in rounds])
        probes[name] = {
            "quick": round(float(np.median(v[~slow])), 4),
            "slow": round(float(np.median(v[slow])), 4),
            "ratio": round(float(np.median(v[slow]) / np.median(v[~slow])), 4),
            "rank_corr": _rank_corr(pair, v),
            "spread": _spread(v),
        }
    spells = [len(list(run)) for _, run in itertools.groupby(slow)]
    return {
        "rounds": len(rounds),
        "cut": round(cut, 2),
        "quick": int((~slow).sum()),
        "slow": int(slow.sum()),
        "levels": [round(float(np.median(lo)), 2), round(float(np.median(hi)), 2)],
        "ratio": round(float(np.median(hi) / np.median(lo)), 4),
        "separation": round(float((hi.mean() - lo.mean()) / pooled), 2),
        "bimodality": round(bimodality(list(pair)), 3),
        "flat": round(flat_bimodality(len(pair)), 3),
        "spread": _spread(pair),
        "probes": probes,
        "spells": spells,
        "slow_by_round": [bool(s) for s in slow],
        "steal_ticks": int(sum(r.get("steal_ticks", 0) for r in rounds)),
        "speedup_vs_contention": None if contend is None else _rank_corr(speedup, contend),
    }


TICK_MS = 1000 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 10.0
"""A ``/proc/stat`` tick in ms."""


def steal(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """For each probe of a ``--tight`` file: the steal over its runs on the cores it ran
    on (the pair's both cores), as ``share`` of those cores' wall time over all rounds
    and ``rounds_with`` (how many rounds saw any), and ``rank_corr``, its rank correlation
    with the probe's reading over the rounds (``None`` where no round saw any)."""
    cores = {"core0": [0], "core1": [1], "pair": [0, 1]}
    rounds = doc["rounds"]
    out: dict[str, dict[str, Any]] = {}
    for name in doc["probes"]:
        stolen = np.array([sum(r[f"{name}_steal"][c] for c in cores[name]) for r in rounds])
        stolen = stolen * TICK_MS
        wall = np.array([r[f"{name}_wall_s"] for r in rounds]) * 1e3 * len(cores[name])
        reading = np.array([r[name] for r in rounds])
        out[name] = {
            "share": round(float(stolen.sum() / wall.sum()), 5),
            "rounds_with": int((stolen > 0).sum()),
            "rank_corr": _rank_corr(reading, stolen),
        }
    return out


def report(doc: dict[str, Any]) -> list[str]:
    """The printed table of :func:`bands`."""
    b = bands(doc)
    unfinished = "" if doc.get("finished", True) else " (the recording did not finish)"
    lines = [
        f"{b['rounds']} rounds from {doc['rounds'][0]['utc']} UTC{unfinished}; pair (-t 2, "
        f"{doc['prompt']}-token prompt) split at {b['cut']:.1f} ms a token: quick {b['quick']} "
        f"rounds at {b['levels'][0]:.2f}, slow {b['slow']} at {b['levels'][1]:.2f} "
        f"(x{b['ratio']:.3f}, separation {b['separation']:.1f} sd); bimodality coefficient "
        f"{b['bimodality']:.2f} (a flat spread of as many {b['flat']:.2f}, two groups above); "
        f"p90/p10 {b['spread']:.2f}",
        f"{'probe':<16} {'quick':>9} {'slow':>9} {'slow/quick':>10} {'rank corr':>9} "
        f"{'p90/p10':>8}",
    ]
    for name, p in b["probes"].items():
        corr = "-" if p["rank_corr"] is None else f"{p['rank_corr']:.2f}"
        lines.append(
            f"{name:<16} {p['quick']:>9.4g} {p['slow']:>9.4g} {p['ratio']:>10.3f} {corr:>9} "
            f"{p['spread']:>8.2f}"
        )
    band = "".join("S" if s else "q" for s in b["slow_by_round"])
    lines.append(f"bands in time order: {band}")
    lines.append(
        f"runs of one band: {len(b['spells'])}, median {np.median(b['spells']):.0f} rounds, "
        f"longest {max(b['spells'])}"
    )
    lines.append(_forecast_line(doc, "pair", "rounds"))
    corr = b["speedup_vs_contention"]
    if corr is not None:
        lines.append(f"the second thread's speedup against both/alone, rank corr: {corr:.2f}")
    if "pair_steal" in doc["rounds"][0]:
        lines.append(
            "steal while each ran, share of its cores' time (rounds with any; rank corr "
            "with its reading): "
            + ", ".join(
                f"{k} {v['share']:.2%} ({v['rounds_with']}; {v['rank_corr']})"
                for k, v in steal(doc).items()
            )
        )
    else:
        lines.append(f"steal over all rounds: {b['steal_ticks']} ticks")
    return lines


FORECAST = (1, 3, 9)
"""How many rounds ahead :func:`forecast` looks (9 tight rounds: about 2 minutes, a run's
length)."""
WARMUP = 5
"""Rounds :func:`forecast` lets pass before it forecasts (the past median needs some)."""
RECENT = 9
"""How many rounds, up to and including the one read, :func:`forecast`'s ``recent``
median takes (9 tight rounds: about the 2 minutes before)."""


def forecast(doc: dict[str, Any], probe: str = "pair") -> dict[int, dict[str, float]]:
    """How well what was known before a stretch of rounds forecasts the stretch's mean
    *probe* reading: for each *k* in ``FORECAST``, over every round *i* from ``WARMUP``
    on with *k* rounds after it, the median relative miss of round *i*'s own reading
    (``reading``: the speed read right before, as ``lyra-simpy speed`` reads it before a
    run), of the median of rounds 0 … *i* (``past``: the host's level so far, as a
    profile's reference recorded through its minutes reads it) and of the median of the
    last ``RECENT`` rounds up to *i* (``recent``: readings spread over the minutes before,
    as ``lyra-simpy speed --probes P --pause-s S`` takes them) against the mean of rounds
    *i* + 1 … *i* + *k*. Where the host's speed holds over *k* rounds the reading
    wins; where it changes within them the level does."""
    x = np.array([r[probe] for r in doc["rounds"]])
    out = {}
    for k in FORECAST:
        idx = range(WARMUP, len(x) - k)
        if len(idx) < 1:
            continue
        ahead = np.array([x[i + 1 : i + 1 + k].mean() for i in idx])
        now = x[list(idx)]
        past = np.array([np.median(x[: i + 1]) for i in idx])
        recent = np.array([np.median(x[max(0, i + 1 - RECENT) : i + 1]) for i in idx])
        out[k] = {
            "reading": round(float(np.median(np.abs(now / ahead - 1))), 4),
            "past": round(float(np.median(np.abs(past / ahead - 1))), 4),
            "recent": round(float(np.median(np.abs(recent / ahead - 1))), 4),
        }
    return out


def _forecast_line(doc: dict[str, Any], probe: str, what: str) -> str:
    """:func:`forecast` of *probe* as one printed line (*what*: rounds or readings)."""
    ahead = ", ".join(
        f"k={k} {v['reading']:.1%} / {v['past']:.1%} / {v['recent']:.1%}"
        for k, v in forecast(doc, probe).items()
    )
    return (
        f"the next k {what}' mean {probe} reading, median miss of the reading before them / "
        f"of the median so far / of the last {RECENT} {what}' median: {ahead}"
    )


def watch_report(doc: dict[str, Any]) -> list[str]:
    """The printed lines for a :func:`watch` file: its spread, bimodality and
    :func:`forecast`."""
    x = [r["beside"] for r in doc["rounds"]]
    if len(x) < 4:
        return [f"{len(x)} readings: too few to read"]
    head = (
        f"{len(x)} beside readings from {doc['rounds'][0]['utc']} UTC: median "
        f"{np.median(x):.3f}, p90/p10 {_spread(np.array(x)):.2f}, bimodality "
        f"{bimodality(x):.2f} (a flat spread of as many {flat_bimodality(len(x)):.2f})"
    )
    return [head, _forecast_line(doc, "beside", "readings")]


def readings(matrix: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The beside readings a stored matrix took before each real run (``lyra-simpy speed
    --prompt N --beside B``, ``machine[].speed_beside``: the prompt's speed over the
    profile's), per point: how many (``n``), their two-means bands' medians (``levels``) and
    sizes (``in_bands``), their :func:`bimodality` and a flat spread's (``flat``)."""
    out = {}
    for key, res in matrix["results"].items():
        got = [
            m["speed_beside"]
            for load in res["loads"].values()
            for m in load.get("machine", [])
            if m.get("speed_beside") is not None
        ]
        if len(got) < 4:
            continue
        x = np.array(got)
        slow = x > split(got)
        out[key] = {
            "n": len(got),
            "levels": [round(float(np.median(x[~slow])), 3), round(float(np.median(x[slow])), 3)],
            "in_bands": [int((~slow).sum()), int(slow.sum())],
            "bimodality": round(bimodality(got), 3),
            "flat": round(flat_bimodality(len(got)), 3),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="run the rounds (needs the llama.cpp build)")
    rec.add_argument("--minutes", type=float, default=25.0)
    rec.add_argument("--out", type=Path, default=OUT)
    rec.add_argument(
        "--tight",
        action="store_true",
        help="rounds of three one-repeat prompts (core 0, the pair, core 1) with the "
        "steal over each, instead of every probe",
    )
    wat = sub.add_parser(
        "watch",
        help="a matrix point's beside reading (lyra-simpy speed) again and again against "
        "a llama-server launched with its flags",
    )
    wat.add_argument("point", help="CFG/REGIME, e.g. default/long (unpacked)")
    wat.add_argument("--minutes", type=float, default=15.0)
    wat.add_argument("--out", type=Path, default=OUT.with_name("watch.json"))
    fac = sub.add_parser(
        "facts", help="the CPU's facts and host_noise.py's reading, as JSON (no engine)"
    )
    fac.add_argument("--seconds", type=float, default=20.0)
    fac.add_argument("--out", type=Path, default=OUT.with_name("facts.json"))
    red = sub.add_parser(
        "readings", help="the bands of a stored matrix's beside readings (no engine)"
    )
    red.add_argument("matrix", type=Path, nargs="?", default=PUBLISHED)
    rep = sub.add_parser("report", help="the bands of a recorded file (no engine)")
    rep.add_argument("file", type=Path, nargs="?", default=OUT)
    args = ap.parse_args(argv)
    if args.cmd == "facts":
        noise = args.out.with_suffix(".noise.json")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "validation" / "host_noise.py"),
                str(args.seconds),
                "--json",
                str(noise),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        got = {**host_facts(), "host_noise": json.loads(noise.read_text())}
        noise.unlink()
        _write(args.out, got)
        print(json.dumps(got, indent=1))
        return 0
    if args.cmd == "readings":
        for key, r in readings(json.loads(args.matrix.read_text())).items():
            print(
                f"{key:<14} {r['n']} readings: {r['in_bands'][0]} at {r['levels'][0]:.3f}, "
                f"{r['in_bands'][1]} at {r['levels'][1]:.3f}; bimodality {r['bimodality']:.2f} "
                f"(flat {r['flat']:.2f})"
            )
        return 0
    if args.cmd == "watch":
        doc = watch(args.point, args.minutes, args.out)
        print("\n".join(watch_report(doc)))
        return 0
    if args.cmd == "record":
        doc = record(args.minutes, args.out, tight=args.tight)
    else:
        if not args.file.is_file():
            raise SystemExit(f"{args.file}: no such file (record one with `record`)")
        doc = json.loads(args.file.read_text())
        if doc.get("probes") == ["beside"]:
            print("\n".join(watch_report(doc)))
            return 0
        if len(doc.get("rounds", [])) < 4:
            raise SystemExit(
                f"{args.file}: rounds: {len(doc.get('rounds', []))} recorded, need at least 4 "
                "to split into bands"
            )
    print("\n".join(report(doc)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
