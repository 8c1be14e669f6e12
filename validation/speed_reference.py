"""Does a speed reference beside each profile measurement track the host's speed?

``lyra-simpy profile`` with ``grid.speed_reference`` times a lone decode request before
every measurement (with ``scale``, it scales the measurement by the references' median
over its own) and writes every (reference, measurement) pair, in the order taken, to
``PROFILE.speed.csv``. Scaling helps only if a measurement runs at the speed its
reference read. This reads the pairs and prints, without a fit in between:

* the references' spread, and the lag-1 correlation of their logs in the order taken
  (whether the host's speed holds from one measurement to the next);
* the correlation and the least-squares slope of each measurement's log deviation from
  its row's median on its reference's log deviation from the references' median (1 and
  1 if the reference reads the measurement's speed exactly; 0 if it reads nothing);
* the rows' spread over the rounds (the median over rows of the largest over the
  smallest repeat) unscaled and scaled, the spread the rounds' median has to absorb.

    PYTHONPATH=src python validation/speed_reference.py \
        results/validation-llamacpp/default_long/profile.csv

(``--json OUT`` writes the numbers too.) ``--take OUT`` first profiles a llama-server of
the llama.cpp matrix's default configuration (``-np 4 -c 4096 -t 2``) with its short and
long grids and ``speed_reference: record`` into ``OUT/default_{short,long}.csv``, then
reads them (``docs/validation/speed-reference-epyc/`` came from ``--take`` on the AMD
EPYC VM, ``docs/VALIDATION-llamacpp.md`` item 12).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def read_pairs(profile: Path) -> list[dict[str, Any]]:
    """The pairs of a profile's ``.speed.csv`` (round, row, phase, reference, latency)."""
    path = profile.with_suffix(".speed.csv")
    if not path.is_file():
        raise SystemExit(
            f"{path}: not found (profile with `speed_reference: record` or `scale` "
            "in the grid writes it)"
        )
    with path.open() as f:
        return [
            {
                "round": int(r["round"]),
                "row": int(r["row"]),
                "phase": r["phase"],
                "reference_ms": float(r["reference_ms"]),
                "latency_ms": float(r["latency_ms"]),
            }
            for r in csv.DictReader(f)
        ]


def _spread(by_row: dict[int, list[float]]) -> float:
    """The median over rows of the largest over the smallest of its repeats."""
    return float(np.median([max(v) / min(v) for v in by_row.values() if len(v) > 1]))


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's correlation; NaN when either does not vary."""
    if len(x) < 3 or np.std(x) == 0.0 or np.std(y) == 0.0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def tracking(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """The numbers the module docstring lists."""
    refs = np.array([p["reference_ms"] for p in pairs])
    lat = np.array([p["latency_ms"] for p in pairs])
    rows = np.array([p["row"] for p in pairs])
    typical = float(np.median(refs))
    log_ref = np.log(refs / typical)
    row_median = {r: float(np.median(lat[rows == r])) for r in set(rows.tolist())}
    log_dev = np.log(lat / np.array([row_median[r] for r in rows]))
    order = np.log(refs)
    lag1 = _corr(order[:-1], order[1:])
    corr = _corr(log_ref, log_dev)
    slope = float(np.dot(log_ref, log_dev) / np.dot(log_ref, log_ref))
    raw: dict[int, list[float]] = {}
    scaled: dict[int, list[float]] = {}
    for p in pairs:
        raw.setdefault(p["row"], []).append(p["latency_ms"])
        scaled.setdefault(p["row"], []).append(p["latency_ms"] * typical / p["reference_ms"])
    by_phase = {}
    for phase in sorted({p["phase"] for p in pairs}):
        mask = np.array([p["phase"] == phase for p in pairs])
        by_phase[phase] = round(_corr(log_ref[mask], log_dev[mask]), 2)
    return {
        "measurements": len(pairs),
        "reference_median_ms": round(typical, 2),
        "reference_p10_p90_ms": [round(float(q), 2) for q in np.percentile(refs, [10, 90])],
        "reference_lag1_corr": round(lag1, 2),
        "corr": round(corr, 2),
        "corr_by_phase": by_phase,
        "slope": round(slope, 2),
        "row_spread_raw": round(_spread(raw), 3),
        "row_spread_scaled": round(_spread(scaled), 3),
    }


def report(name: str, t: dict[str, Any]) -> str:
    lo, hi = t["reference_p10_p90_ms"]
    phases = ", ".join(f"{k} {v:+.2f}" for k, v in t["corr_by_phase"].items())
    return "\n".join([
        f"{name}: {t['measurements']} measurements",
        f"  references: median {t['reference_median_ms']} ms, p10-p90 {lo}-{hi} ms; "
        f"lag-1 correlation in the order taken {t['reference_lag1_corr']:+.2f}",
        f"  a measurement's deviation from its row's median on its reference's: "
        f"correlation {t['corr']:+.2f} ({phases}), slope {t['slope']:+.2f} (1: tracks)",
        f"  rows' spread over the rounds (largest / smallest, median over rows): "
        f"unscaled {t['row_spread_raw']:.3f}, scaled {t['row_spread_scaled']:.3f}",
    ])  # fmt: skip


def take(out: Path) -> list[Path]:
    """Profile the matrix's default server with its short and long grids, the speed
    recorded beside every measurement; the CSVs written."""
    import yaml
    from llamacpp_matrix import grid
    from llamacpp_points import CONFIGS, REGIMES

    from lyra_simpy.cli import main as cli_main
    from lyra_simpy.live import llamacpp

    flags = CONFIGS["default"]
    out.mkdir(parents=True, exist_ok=True)
    written = []
    binary, model = llamacpp.server_binary(), llamacpp.model_file()
    with llamacpp.Server(binary, model, flags, out / "llama-server.log") as srv:
        for name in ("long", "short"):
            spec = {**grid(flags, REGIMES[name]), "speed_reference": "record"}
            csv_path = out / f"default_{name}.csv"
            spec_path = out / f"grid_{name}.yaml"
            spec_path.write_text(yaml.safe_dump(spec))
            code = cli_main(["profile", "--endpoint", srv.url, "--out", str(csv_path),
                             "--grid", str(spec_path), "--flags", " ".join(flags)])  # fmt: skip
            if code != 0:
                raise SystemExit(f"speed_reference.py --take: profile exited {code}")
            written.append(csv_path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="speed_reference.py", description=__doc__.split("\n")[0])
    parser.add_argument("profiles", nargs="*", type=Path, metavar="PROFILE.csv")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT")
    parser.add_argument("--take", type=Path, default=None, metavar="OUT",
                        help="profile the matrix's default server into OUT first")  # fmt: skip
    args = parser.parse_args(argv)
    profiles = [*args.profiles, *(take(args.take) if args.take is not None else [])]
    if not profiles:
        parser.error("give PROFILE.csv files, or --take OUT")
    found = {}
    for path in profiles:
        found[str(path)] = tracking(read_pairs(path))
        print(report(str(path), found[str(path)]))
    if args.json is not None:
        args.json.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
