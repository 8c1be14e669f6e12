"""A hard search of the invariants: ``python tests/invariants/search.py [--examples N]``
(``tox -e invariants``; 1000 scenarios by default).

It draws random scenarios from the property tests' strategies (every scheduler, prefix
cache, admission, router, disaggregation, speculative decoding, tiny KV pools and pool
overrides, zero and tiny costs, open and closed loops, rate schedules, and processes —
replica faults, an autoscaler, load spikes — switched on at random; one in four cut by
``until_s``)
and runs each through the same checks as ``test_invariants.py``. Unlike the property
test it does not stop at the first failure: it prints how many scenarios ran, how
they were spread over the policies, and how many violated which check (the failing
line and one example scenario each). Exit status 1 if any did.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # test_invariants, builders

import test_invariants as inv  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _kind(raw: dict[str, Any]) -> dict[str, str]:
    """What the scenario exercises, for the spread printed at the end."""
    cluster = raw.get("cluster") or {}
    if cluster.get("disaggregation"):
        topology = "disaggregated"
    elif cluster.get("groups"):
        topology = "cluster+pool_override"
    elif cluster:
        topology = "cluster"
    else:
        topology = "single"
    cost = raw["cost"]
    free = cost["name"] == "linear" and cost["base_ms"] < 1e-6
    return {
        "scheduler": raw["scheduler"]["name"],
        "admission": raw["admission"]["name"],
        "prefix_cache": (raw.get("prefix_cache") or {}).get("name", "none"),
        "router": cluster.get("router", {}).get("name", "none"),
        "topology": topology,
        "arrival": raw["workload"]["arrival"]["name"],
        "speculative": "yes" if raw.get("speculative") else "no",
        "cost": f"{cost['name']}{'(zero/tiny)' if free else ''}",
        "kv_pool": "tiny(<=8 blocks)" if raw["kv_cache"]["num_blocks"] <= 8 else "small",
        "processes": "+".join(sorted(raw.get("processes") or {})) or "none",
        "rate_schedule": "yes" if raw["workload"].get("rate_schedule") else "no",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=1000, help="scenarios to run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the search")
    args = parser.parse_args(argv)

    ran = 0
    spread: dict[str, Counter[str]] = {}
    violations: Counter[str] = Counter()
    example: dict[str, str] = {}

    cases = st.one_of(
        st.tuples(st.just("full"), inv.scenarios()),
        st.tuples(st.just("full"), inv.scenarios()),
        st.tuples(st.just("full"), inv.scenarios()),
        st.tuples(st.just("until_s"), inv.scenarios(until=True)),
    )

    @settings(
        max_examples=args.examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        derandomize=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(cases)
    def search(case: tuple[str, dict[str, Any]]) -> None:
        nonlocal ran
        mode, raw = case
        ran += 1
        for dim, value in _kind(raw).items():
            spread.setdefault(dim, Counter())[value] += 1
        try:
            (inv.check_full_run if mode == "full" else inv.check_until_run)(raw)
        except Exception as exc:  # a violation: where, not a stop
            frames = [f for f in traceback.extract_tb(exc.__traceback__)
                      if f.filename.endswith("test_invariants.py")]  # fmt: skip
            where = frames[-1] if frames else traceback.extract_tb(exc.__traceback__)[-1]
            line = (where.line or "").strip()
            key = f"{mode}: line {where.lineno}: {line} ({type(exc).__name__})"
            violations[key] += 1
            example.setdefault(key, json.dumps(raw))

    seed(args.seed)(search)()
    print(f"invariants: {ran} random scenarios ran, {sum(violations.values())} violated")
    for dim, counts in spread.items():
        print(f"  {dim}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for key, count in violations.most_common():
        print(f"VIOLATED {count}x {key}\n  e.g. {example[key]}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
