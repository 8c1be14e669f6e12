"""The profile's prompt-cache probe, taken for the matrix's stored points.

``lyra-simpy profile`` times what llama-server's prompt cache in RAM costs a request's
launch (``grid.save_prompt_tokens``, :mod:`lyra_simpy.calibration.savefit`) since
``docs/VALIDATION-llamacpp.md`` item 63; the points' stored profiles were taken before
it. ``python validation/llamacpp_save_probe.py [--points CFG_REGIME ...]`` starts each
point's server as ``validate_cpu.py --matrix`` launched it (``CONFIGS``), runs that
probe alone with the point's ``grid.yaml`` (the grid's defaults: prompts of 32, 256, 512
and 768 tokens, 5 rounds), and writes ``profile.save.csv`` beside the point's
``profile.csv`` — which ``lyra-simpy calibrate`` and ``--resimulate`` then read — and
``save_probe.json`` (when, flags, the fit). Needs the stored points
(``results/validation-llamacpp/POINT``); a point whose profile took the probe itself
(item 64 on) is left as it is. ``--collect OUT`` runs no server: it gathers
every point's probe rows and record into *OUT* (item 63's are kept as
``docs/validation/llamacpp-save-probe-item63.json``, which tests read). ``--in-profile
OUT`` gathers instead the probes the points' own profiles took (item 64's are kept as
``docs/validation/llamacpp-save-in-profile-item64.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "validation-llamacpp"


def probe_point(name: str, seed: int) -> dict[str, object]:
    """Run the probe on point *name*'s server; write its files and return the record."""
    import numpy as np
    from llamacpp_points import CONFIGS

    from lyra_simpy.calibration.savefit import fitted_save, write_save
    from lyra_simpy.live import llamacpp
    from lyra_simpy.live.llamacpp_probes import llamacpp_config, save_sizes
    from lyra_simpy.live.prober import Prober
    from lyra_simpy.live.profile_grid import load_grid

    here = OUT / name
    cfg = name.rsplit("_", 1)[0]
    flags = CONFIGS[cfg]
    grid = load_grid(here / "grid.yaml")
    llama = llamacpp_config(" ".join(flags), grid)
    sizes = save_sizes(grid, llama)
    p = min(grid.prefill_tokens)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    log = here / "save_probe.log"
    with llamacpp.Server(llamacpp.server_binary(), llamacpp.model_file(), flags, log) as srv:
        prober = Prober.for_endpoint(srv.url, "openai", grid, seed)
        prober.pin = True

        async def go() -> list[tuple[int, float]] | None:
            await prober.prefill(8)  # warm-up, as the profile's
            return await prober.save_probe(sizes, grid.save_repeats, p)

        rows = asyncio.run(go())
    if rows is None:
        raise SystemExit(f"{name}: the server gave no timings.prompt_ms")
    write_save(here / "profile.csv", rows)
    tokens = np.array([n for n, _ in rows], dtype=float)
    fit = fitted_save(tokens, np.array([ms for _, ms in rows]))
    record = {"started": started, "flags": " ".join(flags), "sizes": sizes,
              "prompt_tokens": p, "repeats": grid.save_repeats, "seed": seed,
              "fit": fit.model_dump() if fit else None}  # fmt: skip
    (here / "save_probe.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def in_profile(here: Path) -> dict[str, object]:
    """The prompt-cache probes the point in *here* took inside its profiles (item 64:
    ``profile*.save.csv``, a profile the full-batch check set aside included, in the
    order taken), each one's rows and fit; and when the server's log first shows its
    cache evicting to make room (``removing oldest entry``; its time since the server
    started, as the log gives it)."""
    from lyra_simpy.calibration.savefit import fitted_save, read_save

    def order(path: Path) -> int:
        tail = path.name.removesuffix(".save.csv").rsplit("-", 1)[-1]
        return int(tail) if tail.isdigit() else 10**6  # (the kept profile was taken last)

    profiles = {}
    for path in sorted(here.glob("profile*.save.csv"), key=order):
        got = read_save(path.with_name(path.name.removesuffix(".save.csv") + ".csv"))
        if got is None or not len(got[0]):
            raise SystemExit(f"--in-profile: {path}: no prompt-cache rows in it")
        tokens, ms = got
        fit = fitted_save(tokens, ms)
        rows = [[int(n), float(w)] for n, w in zip(tokens, ms, strict=True)]
        profiles[path.name] = {"rows": rows, "fit": fit.model_dump() if fit else None}
    lines = (here / "llama-server.log").read_text().splitlines()
    first = next((x.split()[0] for x in lines if "removing oldest entry" in x), None)
    # when each probe ran, as the log gives it: its largest prompts (no other probe sends
    # one of that size), `repeats` a probe, the profiles' probes in the order taken
    for k, got in enumerate(profiles.values()):
        largest = max(n for n, _ in got["rows"])
        at = [x.split()[0] for x in lines if re.search(rf"/\s+{largest} tokens", x)]
        per = sum(1 for n, _ in got["rows"] if n == largest)
        got["log_times"] = at[k * per : (k + 1) * per]
    return {"profiles": profiles, "first_eviction": first}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", nargs="+", metavar="CFG_REGIME", default=None,
                    help="stored points (default: every one with a grid.yaml)")  # fmt: skip
    ap.add_argument("--seed", type=int, default=63)
    ap.add_argument("--collect", type=Path, default=None, metavar="OUT",
                    help="gather the stored probes into OUT instead (no server)")  # fmt: skip
    ap.add_argument("--in-profile", type=Path, default=None, metavar="OUT",
                    help="gather the probes the points' own profiles took (every one, "
                         "superseded ones too) into OUT instead (no server)")  # fmt: skip
    args = ap.parse_args(argv)
    names = args.points or sorted(p.name for p in OUT.glob("*_*") if (p / "grid.yaml").is_file())
    if args.in_profile:
        kept = {name: in_profile(OUT / name) for name in names}
        args.in_profile.write_text(json.dumps(kept, indent=1) + "\n")
        for name, got in kept.items():
            for k, v in got["profiles"].items():
                print(f"{name:15s} {k:22s} {json.dumps(v['fit'])}")
        return 0
    if args.collect:
        kept = {}
        for name in names:
            if not (OUT / name / "save_probe.json").is_file():
                continue  # (a point whose profile took the probe itself: --in-profile)
            rows = (OUT / name / "profile.save.csv").read_text().splitlines()[1:]
            kept[name] = {**json.loads((OUT / name / "save_probe.json").read_text()),
                          "rows": [[int(n), float(ms)] for n, ms in
                                   (line.split(",") for line in rows)]}  # fmt: skip
        args.collect.write_text(json.dumps(kept, indent=1) + "\n")
        return 0
    for name in names:
        if not (OUT / name / "grid.yaml").is_file():
            raise SystemExit(f"--points: {name}: no {OUT / name / 'grid.yaml'} (run "
                             "validate_cpu.py --matrix)")  # fmt: skip
    for name in names:
        if "save_probe" in (yaml.safe_load((OUT / name / "profile.yaml").read_text()) or {}):
            print(f"{name:15s} its profile took the probe itself (item 64): left as it is")
            continue  # (its profile.save.csv is the profile's own: not overwritten)
        got = probe_point(name, args.seed)
        fit = got["fit"]
        print(f"{name:15s} {json.dumps(fit)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "validation"))
    raise SystemExit(main())
