"""Sweep files: a base scenario, a grid and zipped lists over its fields, and seeds.

.. code-block:: yaml

    base: ../scenarios/lab02_goodput_vs_batch.yaml   # or an inline scenario mapping
    grid:                          # cartesian product, first path outermost
      scheduler.max_num_seqs: [8, 16, 32]
      workload.arrival.rate_per_s: [1.5, 2.5]
    zip:                           # walked together, so the lists must be equally long
      slo.ttft_ms: [200, 300]
      slo.tpot_ms: [30, 40]
    seeds: 3                       # a count n: the base's seed + 0 … n-1; or a list
    out: results/sweeps/lab02      # relative to the working directory
    quick: {seeds: 1}              # merged into this file with --quick

Points = grid product × zip rows × seeds. A point is the base (after its own ``quick:``
block with ``--quick`` and the ``--set`` overrides) with its values set through the
same dotted paths as ``--set``, validated as a scenario before anything runs; a bad
path or value fails as one line naming the point, the field, the value and what is
allowed. The base's own ``variants:``/``grid:`` are dropped: the sweep's grid replaces
them.

A point's *key* names its result file: the first 16 hex digits of the SHA-256 of the
canonical JSON (sorted keys) of the resolved scenario and the package version. Fields
that only present results (``name``, ``label``, ``description``, ``report``,
``figures``) are left out, and so is everything about how the sweep runs (executor,
workers, wall clock): equal keys mean equal simulations. Files a scenario reads (any
``path`` field: traces, cost fits) enter by the SHA-256 of their content, so editing a
trace or refitting a profile reruns the points that read it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, PositiveInt, ValidationError, field_validator

from lyra_simpy.config import Closed
from lyra_simpy.dotted import deep_merge
from lyra_simpy.errors import LyraError, ScenarioError, from_validation_error
from lyra_simpy.files import per_file_version, read_yaml
from lyra_simpy.output.provenance import package_version
from lyra_simpy.scenario import Scenario, load_scenario, scenario_from_dict
from lyra_simpy.workload.catalog import resolve_path

#: Fields that present results without changing them: left out of a point's key.
PRESENTATION_FIELDS = ("name", "label", "description", "report", "figures", "output")


class SweepSpec(Closed):
    """What a sweep file holds (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base: str | dict[str, Any]
    """Path of the base scenario YAML (relative to the sweep file), or the scenario itself."""
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    """Dotted path → values; every combination is a point."""
    zip: dict[str, list[Any]] = Field(default_factory=dict)
    """Dotted path → values, walked together (row i takes the i-th value of each)."""
    seeds: PositiveInt | list[int] = 1
    """Repeats: a count (the base's seed + 0, 1, …) or the seeds themselves."""
    out: str | None = None
    """Result folder (default ``results/sweeps/<sweep name>``)."""
    quick: dict[str, Any] = Field(default_factory=dict)
    """Overrides of this file for a short run (``--quick``)."""

    @field_validator("grid", "zip")
    @classmethod
    def _paths(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for path, values in value.items():
            if path == "seed":
                raise ValueError("got path 'seed', must be set through seeds:")
            if not values:
                raise ValueError(f"{path}: got [], must list at least one value")
        return value

    @field_validator("zip")
    @classmethod
    def _equal_lengths(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        lengths = {path: len(vals) for path, vals in value.items()}
        if len(set(lengths.values())) > 1:
            got = ", ".join(f"{p}: {n}" for p, n in lengths.items())
            raise ValueError(f"got lists of lengths {got}, must all be equally long")
        return value

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, value: int | list[int]) -> int | list[int]:
        if isinstance(value, list) and (not value or len(set(value)) != len(value)):
            raise ValueError("must be a non-empty list of distinct seeds")
        return value


@dataclass(frozen=True)
class Point:
    """One simulation of a sweep: the swept *values*, the *seed*, the scenario, its key."""

    index: int
    values: dict[str, Any]
    seed: int
    scenario: Scenario
    key: str


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: every point resolved, none run."""

    name: str
    spec: SweepSpec
    base: Scenario
    points: list[Point]

    @property
    def swept(self) -> list[str]:
        """The swept dotted paths, grid first, then zip."""
        return [*self.spec.grid, *self.spec.zip]


def _read_paths(node: Any) -> Iterator[str]:
    """Every string under a key named ``path``: the files a scenario reads."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "path" and isinstance(value, str):
                yield value
            else:
                yield from _read_paths(value)
    elif isinstance(node, list):
        for value in node:
            yield from _read_paths(value)


@per_file_version(maxsize=256)
def _digest_of(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


def _digest(path: Path) -> str:
    """SHA-256 of the file's content, computed once per file version."""
    return _digest_of(path)


def _file(path: str, base_dir: Path) -> Path:
    """The file a ``path:`` names (a known trace's name included); a name that is not
    here stays a path that cannot be read ("unreadable")."""
    try:
        return resolve_path(path, base_dir)
    except LyraError:
        return base_dir / path


def point_key(scenario: Scenario) -> str:
    """The key of *scenario*'s result (see the module docstring)."""
    resolved = scenario.resolved()
    for name in PRESENTATION_FIELDS:
        resolved.pop(name, None)
    files = {p: _digest(_file(p, scenario.base_dir)) for p in _read_paths(resolved)}
    blob = json.dumps(
        {"scenario": resolved, "version": package_version(), "files": files},
        sort_keys=True,
        separators=(",", ":"),
        allow_nan=False,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _rows(spec: SweepSpec) -> list[dict[str, Any]]:
    grid = [
        dict(zip(spec.grid, combo, strict=True)) for combo in itertools.product(*spec.grid.values())
    ]
    n_zip = len(next(iter(spec.zip.values()))) if spec.zip else 1
    zipped = [{p: vals[i] for p, vals in spec.zip.items()} for i in range(n_zip)]
    return [{**g, **z} for g in grid for z in zipped]


def sweep_from_dict(
    raw: dict[str, Any],
    base_dir: Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    quick: bool = False,
    name: str = "sweep",
) -> Sweep:
    """Validate a sweep given as a mapping and resolve every point (none runs)."""
    if not isinstance(raw, dict):
        raise ScenarioError(f"sweep: got {type(raw).__name__}, must be a mapping of fields")
    if quick:
        raw = deep_merge(raw, raw.get("quick") or {})
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        raise from_validation_error(exc) from None
    if isinstance(spec.base, str):
        base = load_scenario((base_dir or Path.cwd()) / spec.base, overrides, quick)
    else:
        base = scenario_from_dict(spec.base, base_dir, overrides, quick)
    base = base.base()  # its own variants give way to the sweep's grid
    seeds = (
        spec.seeds if isinstance(spec.seeds, list) else [base.seed + i for i in range(spec.seeds)]
    )
    points: list[Point] = []
    for values in _rows(spec):
        label = ",".join(f"{p}={v}" for p, v in values.items()) or "base"
        for seed in seeds:
            where = ", ".join([*(f"{p}={v!r}" for p, v in values.items()), f"seed={seed}"])
            try:
                scenario = base.with_values({**values, "seed": seed, "label": label})
            except ScenarioError as exc:
                raise ScenarioError(f"sweep point ({where}): {exc}") from None
            points.append(Point(len(points), values, seed, scenario, point_key(scenario)))
    return Sweep(name=name, spec=spec, base=base, points=points)


def load_sweep(
    path: str | Path, overrides: list[str] | tuple[str, ...] = (), quick: bool = False
) -> Sweep:
    """Read the sweep file at *path*; *overrides* (``path=value``) apply to the base
    scenario, *quick* to both files' ``quick:`` blocks."""
    p = Path(path)
    raw = read_yaml(p, "sweep")
    return sweep_from_dict(raw, p.parent.resolve(), overrides, quick, name=p.stem)
