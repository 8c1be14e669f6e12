"""Profile and real runs at one speed of the host: the gate both real-engine matrices use.

This VM's speed changes by up to 2x from one minute to the next (``validation/host_noise.py``;
``docs/VALIDATION-vllm.md``). A real run taken at another speed than the profile measures
the host, not the simulator. So the profile is taken when the host runs at its quickest
(:func:`floor_of`), checked against that speed, and every real run starts only once a lone
request's decode step (the *probe*: the server's batch-1 step as a client sees it, e.g.
:func:`~lyra_simpy.live.client.decode_step_ms`) is within :data:`GATE` of the profile's
(:func:`wait_for_speed`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import httpx
import numpy as np

Probe = Callable[[], "float | None"]
"""The server's batch-1 decode step right now (ms; None when the probe failed)."""

GATE = 0.15
"""A real run starts once the probe is within this fraction of the profile's batch-1
step."""
GATE_WAIT_S = 90.0
"""The longest wait for that speed; the run then starts anyway (and shows it)."""
GATE_PAUSE_S = 15.0
FLOOR_PROBES = 6
"""Lone-request probes, 5 s apart, whose fastest is the host's quickest speed."""
PROFILE_TRIES = 3
"""Profiles taken at most, until one's batch-1 step is within :data:`GATE` of the floor
(and, for :func:`batch_checked`, until its full-batch row is within :data:`GATE` of the
check)."""


_PROBE_IDS = np.random.default_rng()
"""Fresh prompt ids each process (as ``lyra-simpy profile`` draws them): none cached."""


def lone_decode_step(url: str, extra: dict[str, object], outputs: int = 33) -> float | None:
    """The server's batch-1 decode step right now: one request of 32 fresh random prompt
    tokens and *outputs* output tokens, alone (:func:`~lyra_simpy.live.client.decode_step_ms`;
    *extra*: the request fields the server needs)."""
    from lyra_simpy.live.client import decode_step_ms

    prompt = _PROBE_IDS.integers(1000, 30000, size=32).tolist()
    return decode_step_ms(url, prompt, outputs, extra=dict(extra))


def lone_prompt_ms(url: str, prompt: list[int]) -> float | None:
    """The server's own time for *prompt* with nothing else running: ``timings.prompt_ms``
    of a ``/completion`` with one output and ``cache_prompt: false`` (no HTTP path or
    client in it); None when the request fails."""
    body = {"prompt": prompt, "n_predict": 1, "cache_prompt": False}
    try:
        reply = httpx.post(f"{url}/completion", json=body, timeout=120).json()
        return float(reply["timings"]["prompt_ms"])
    except (httpx.HTTPError, KeyError, TypeError, ValueError):
        return None


def within(step: float | None, ref_ms: float | None) -> bool:
    """*step* is within :data:`GATE` of *ref_ms* (True when there is no reference)."""
    return ref_ms is None or (step is not None and abs(step / ref_ms - 1.0) <= GATE)


def wait_for_speed(probe: Probe, ref_ms: float | None, name: str) -> list[float | None]:
    """Probe every :data:`GATE_PAUSE_S` until the step is within :data:`GATE` of *ref_ms*
    or :data:`GATE_WAIT_S` have passed; every probe taken, the last one last."""
    seen: list[float | None] = []
    deadline = time.monotonic() + GATE_WAIT_S
    while True:
        step = probe()
        seen.append(step)
        if within(step, ref_ms) or time.monotonic() > deadline:
            return seen
        print(f"{name}: batch-1 step {step} ms, profiled {ref_ms:.1f} ms: waiting", flush=True)
        time.sleep(GATE_PAUSE_S)


def gated_run(probe: Probe, ref_ms: float | None, replay: Callable[[Path], None], folder: Path,
              name: str, redo: int = 0) -> dict[str, object]:  # fmt: skip
    """One real run into *folder* (``replay(folder)``), started once :func:`wait_for_speed`
    lets it, and the probe read again right after it. With *redo* > 0 the gate holds at both
    ends: a run whose reading afterwards is outside :data:`GATE` is moved aside (to
    ``out-of-band-RUN-K`` beside it, kept; no ``run*`` glob takes it) and taken again, at
    most *redo* times; the last one stays whatever it read. The host's speed can change
    during a run, which a gate before it alone cannot see (``docs/VALIDATION-llamacpp.md``
    item 14). Returns the record the matrices keep per run: ``step_before`` (the gate's
    last reading), ``gate_probes``, ``gate_readings`` (every reading the gate took before
    the run, the last one last: the last is chosen by the gate, it is the one that came
    within it, so where the host runs quicker or slower than the reference it reads the
    host less well than all of them do; item 40), ``step_after``, ``wall_s``, and with
    *redo* ``out_of_band`` (the readings after each run set aside)."""
    set_aside: list[float | None] = []
    while True:
        gate = wait_for_speed(probe, ref_ms, name)
        t0 = time.time()
        replay(folder)
        wall = round(time.time() - t0, 1)
        after = probe()
        if within(after, ref_ms) or len(set_aside) >= redo:
            record: dict[str, object] = {"step_before": gate[-1], "gate_probes": len(gate),
                                         "gate_readings": gate, "step_after": after,
                                         "wall_s": wall}  # fmt: skip
            if redo:
                record["out_of_band"] = set_aside
            return record
        set_aside.append(after)
        folder.rename(folder.with_name(f"out-of-band-{folder.name}-{len(set_aside)}"))
        print(f"{name}: batch-1 step {after} ms after the run, profiled {ref_ms} ms: "
              "set aside, taking it again", flush=True)  # fmt: skip


def floor_of(probe: Probe) -> tuple[float | None, list[float | None]]:
    """The host's quickest batch-1 step: the fastest of :data:`FLOOR_PROBES` probes 5 s
    apart, and every probe."""
    probes: list[float | None] = []
    for _ in range(FLOOR_PROBES):
        probes.append(probe())
        time.sleep(5.0)
    return min((p for p in probes if p is not None), default=None), probes


def profile_step(csv: Path) -> float | None:
    """A profile's decode step at batch 1 (the median over its contexts), ms."""
    return batch_row(csv, 1)


def batch_row(csv: Path, batch: int) -> float | None:
    """A profile's decode step at *batch* sequences in one forward pass (the median over
    its contexts; a profile without the ``passes`` column: every decode row of *batch*),
    ms."""
    from lyra_simpy.errors import LyraError
    from lyra_simpy.live.speed import one_pass_decode_ms

    try:
        steps = one_pass_decode_ms(csv, batch)
    except LyraError:  # no profile there, or not one (read_profile's refusal)
        return None
    return round(float(np.median(steps)), 1) if steps else None


def batch_checked(
    csv: Path,
    batch: int,
    check: Probe,
    retake: Callable[[], Path],
    tries: int = PROFILE_TRIES,
) -> tuple[Path, list[dict[str, float | None]]]:
    """The profile *csv* checked at the server's full batch, taken again while it is off.

    The speed gate's probe is a lone request: it reads the host's batch-1 speed, which
    need not move with its speed at *batch* sequences (``docs/VALIDATION-llamacpp.md``
    item 19: a profile's four-sequence row 9 % quicker than the one before it, its
    batch-1 row 7 % slower, and the runs at four sequences as slow as the one before).
    So right after a profile, *check* measures the step of *batch* sequences decoding
    together (the profile's own probe, several times); while the profile's row for that
    batch (:func:`batch_row`) is not within :data:`GATE` of it, *retake* profiles again,
    up to *tries* profiles in all. The last profile stays whatever it read. Returns its
    path and one record per profile: ``profile_ms`` (its row), ``check_ms``."""
    record: list[dict[str, float | None]] = []
    while True:
        row, got = batch_row(csv, batch), check()
        record.append({"profile_ms": row, "check_ms": None if got is None else round(got, 1)})
        if (row is not None and within(got, row)) or len(record) >= tries:
            return csv, record
        print(f"full-batch check: {batch} sequences {record[-1]['check_ms']} ms, the profile's "
              f"row {row} ms: "
              "profiling again", flush=True)  # fmt: skip
        csv = retake()


def profile_at_floor(
    probe: Probe,
    take_profile: Callable[[], Path],
    name: str,
    floor: float | None = None,
    check: Literal["profile", "probe"] = "profile",
    tries: int = PROFILE_TRIES,
) -> dict[str, object]:
    """Profile when the host runs at its quickest: find the floor (:func:`floor_of`,
    unless *floor* is given), wait for it, profile (*take_profile* writes the CSV and
    returns its path), and profile again (up to :data:`PROFILE_TRIES` times) while the
    speed after it is not within :data:`GATE` of the floor. *check*: how that speed is
    read — ``profile``, the profile's own batch-1 step (when its batch-1 rows decode what
    the probe decodes: the vLLM matrix's short contexts); ``probe``, a probe taken right
    after the profile (when they do not: the llama.cpp matrix profiles batch 1 at
    200–400 tokens of context, slower than the probe's 32 whatever the host). The runs
    then wait for that speed: the profile's step (``profile``) or the floor (``probe``),
    returned as ``run_ref_ms``. *tries*: profiles taken at most (1: the profile prices
    its rows at its own speed, ``grid.speed_reference``)."""
    probes: list[float | None] = []
    if floor is None:
        floor, probes = floor_of(probe)
    csv, after = None, None
    taken = 0
    for taken in range(1, tries + 1):  # noqa: B007 (the count is returned)
        wait_for_speed(probe, floor, name)
        csv = take_profile()
        after = profile_step(csv) if check == "profile" else probe()
        if within(after, floor):
            break
    step = profile_step(csv) if csv is not None else None
    return {"floor_probes_ms": probes, "floor_ms": floor, "profile_tries": taken,
            "profile_step_ms": step, "probe_after_profile_ms": after if check == "probe" else None,
            "run_ref_ms": step if check == "profile" else floor}  # fmt: skip
