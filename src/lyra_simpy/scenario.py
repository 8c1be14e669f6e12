"""The scenario: one YAML file → one validated, frozen :class:`Scenario`.

Loading order: read YAML → with ``quick``, deep-merge the file's ``quick:`` block →
apply ``--set path=value`` overrides → fill in the knobs of an ``engine:`` preset
(:mod:`lyra_simpy.presets`) → validate. ``variants:`` (a list of labelled
``set:`` blocks, a ``grid:`` of one dotted path over values, or a ``whatif:`` of
candidates × workloads) expand into one resolved
scenario each, validated before anything runs (each once). Without ``quick``, the
``quick:`` run (and its variants) is validated as well, so a typo inside the block
fails whichever way the file is loaded. Any problem is one line naming the field
path, the value and what is allowed (:class:`~lyra_simpy.errors.ScenarioError`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    PositiveFloat,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from lyra_simpy.cluster.config import ClusterConfig, ReplicaSpec, check_replica
from lyra_simpy.config import Closed
from lyra_simpy.cost import CostConfig
from lyra_simpy.cost.catalog import CatalogError
from lyra_simpy.dotted import deep_merge, parse_override, set_path
from lyra_simpy.engine.kv import ACTIVATION_RESERVE_GIB, MEM_FRACTION, KVCacheConfig
from lyra_simpy.engine.speculative import SpeculativeConfig
from lyra_simpy.errors import ScenarioError, from_validation_error
from lyra_simpy.files import read_yaml
from lyra_simpy.policies import (
    AdmissionConfig,
    AlwaysConfig,
    ContinuousConfig,
    SchedulerConfig,
)
from lyra_simpy.policies.prefix_cache import PrefixCacheConfig
from lyra_simpy.presets import EngineConfig, apply_engine
from lyra_simpy.processes import ProcessConfig
from lyra_simpy.processes import check as check_processes
from lyra_simpy.report import FigureSpec, OutputConfig, ReportConfig
from lyra_simpy.variants import Grid, Variant
from lyra_simpy.whatif import WhatIf
from lyra_simpy.workload import WorkloadConfig, check_files


class SLOConfig(Closed):
    """Service-level objectives; a request meets them when every set one holds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_ms: PositiveFloat | None = None
    tpot_ms: PositiveFloat | None = None
    e2el_ms: PositiveFloat | None = None


class SimulationConfig(Closed):
    """How the run itself is carried out (not what is modelled)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    until_s: PositiveFloat | None = None
    """Stop the clock here; requests still in the system end ``unfinished``."""
    fuse_iterations: bool = True
    """Advance runs of unchanged decode iterations as one event (identical results)."""
    timeseries: bool = True
    """Keep the per-iteration time series (one compact row per iteration)."""


class Scenario(Closed):
    """A complete, validated simulation scenario."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "scenario"
    description: str = ""
    label: str = "base"
    """Which variant this is (``base`` when the file has none)."""
    seed: int = Field(default=0, ge=0)
    """Root of the run's random streams (:mod:`lyra_simpy.rng`); numpy seeds are >= 0."""
    engine: EngineConfig | None = None
    """A real engine's launch flags (``sglang``, ``vllm``); the knobs they set are
    filled in before validation (:mod:`lyra_simpy.presets`)."""
    workload: WorkloadConfig
    scheduler: SchedulerConfig = Field(default_factory=ContinuousConfig)
    kv_cache: KVCacheConfig
    prefix_cache: PrefixCacheConfig | None = None
    """Reuse cached prompt prefixes (``block_hash``: vLLM, ``radix``: SGLang); None: off."""
    cost: CostConfig
    slo: SLOConfig = Field(default_factory=SLOConfig)
    admission: AdmissionConfig = Field(default_factory=AlwaysConfig)
    cluster: ClusterConfig | None = None
    """Several replicas behind a router (None: one replica)."""
    speculative: SpeculativeConfig | None = None
    """Speculative decoding on every replica (None: off; see
    :mod:`lyra_simpy.engine.speculative`)."""
    """Which arrivals enter the scheduler's queue (``always``, or ``slo``: needs an SLO)."""
    simulation: SimulationConfig = Field(default_factory=SimulationConfig)
    processes: dict[str, ProcessConfig] = Field(default_factory=dict)
    """Processes acting while the run goes on — replica ``faults``, an ``autoscaler``,
    a ``load_spike`` — by label (the label is the ``name`` unless one is given); see
    :mod:`lyra_simpy.processes`. Empty: none (the engine pays nothing for them)."""
    variants: list[Variant] = Field(default_factory=list)
    grid: Grid | None = None
    whatif: WhatIf | None = None
    """Candidates × benchmark workloads, scored by speedup over a baseline
    (:mod:`lyra_simpy.whatif`)."""
    report: ReportConfig = Field(default_factory=ReportConfig)
    figures: list[FigureSpec] = Field(default_factory=list)
    output: OutputConfig = Field(default_factory=OutputConfig)
    quick: dict[str, Any] = Field(default_factory=dict)
    """Overrides for a short run (tests, CI, ``--quick``), merged into the file."""

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)
    _expanded: list[Scenario] | None = PrivateAttr(default=None)
    """The variants once validated: :meth:`expand` validates each one only once, however
    often loading, ``validate`` and the runner ask for them."""

    @model_validator(mode="after")
    def _one_expansion(self) -> Scenario:
        used = [k for k in ("variants", "grid", "whatif") if getattr(self, k)]
        if len(used) > 1:
            raise ValueError(f"use one of variants, grid and whatif, not {' and '.join(used)}")
        return self

    @model_validator(mode="after")
    def _replicas_fit(self) -> Scenario:
        for where, spec in self.replica_specs_named():
            check_replica(spec, self.workload, where)
            if self.speculative is not None and spec.scheduler.name in ("static", "llamacpp"):
                raise ValueError(
                    f"speculative: got a draft with {where}scheduler "
                    f"{spec.scheduler.name!r}, must be used with continuous, chunked_prefill "
                    "or prefill_first"
                )
            if self.speculative is not None and getattr(
                spec.scheduler, "prefill_beside_decode", False
            ):
                raise ValueError(
                    f"speculative: got a draft with {where}scheduler.prefill_beside_decode: "
                    "true; prompts beside the decodes are modelled without drafts: set "
                    "one of them"
                )
        share = self.workload.request_path_cpu_share
        if share and (self.cluster is not None or self.processes):
            where = "a cluster" if self.cluster is not None else "processes"
            raise ValueError(
                f"workload.request_path_cpu_share: got {share} with {where}, must be used "
                "with a single engine (its arrivals are charged to its own iterations)"
            )
        d = self.cluster.disaggregation if self.cluster is not None else None
        if d is not None:
            for where, spec in self.replica_specs_named():
                if spec.scheduler.name == "llamacpp":
                    raise ValueError(
                        f"{where}scheduler: got 'llamacpp' in a disaggregated cluster; "
                        "llama-server has no prefill/decode hand-off to model: use "
                        "continuous, chunked_prefill or prefill_first there"
                    )
        if d is not None and d.link.kv_bytes_per_token is None:
            prefill = self.replica_specs()[0]
            if prefill.cost.name != "roofline":
                raise ValueError(
                    "cluster.disaggregation.link.kv_bytes_per_token: got None, must be set "
                    f"unless the prefill pool's cost is roofline (it is {prefill.cost.name!r})"
                )
        return self

    @field_validator("processes", mode="before")
    @classmethod
    def _process_names(cls, value: Any) -> Any:
        """An entry's ``name`` defaults to its key (``processes: {faults: {...}}``)."""
        if not isinstance(value, dict):
            return value
        return {k: {"name": k, **v} if isinstance(v, dict) else v for k, v in value.items()}

    @model_validator(mode="after")
    def _processes_fit(self) -> Scenario:
        if self.processes:
            cluster = self.cluster
            check_processes(
                self.processes,
                len(self.replica_specs()),
                bool(cluster is not None and cluster.groups),
                cluster is not None and cluster.disaggregation is not None,
            )
        return self

    @model_validator(mode="after")
    def _kv_blocks_from_catalog(self) -> Scenario:
        """Resolve ``kv_cache.num_blocks: auto`` from the cost model's catalog entries."""
        kv = self.kv_cache
        if kv.num_blocks != "auto":
            return self
        used = {
            "mem_fraction": MEM_FRACTION if kv.mem_fraction is None else kv.mem_fraction,
            "activation_reserve_gib": ACTIVATION_RESERVE_GIB
            if kv.activation_reserve_gib is None
            else kv.activation_reserve_gib,
        }
        try:
            blocks = self.cost.kv_blocks(
                kv.block_size, max_running=self.scheduler.max_batch, **used
            )
        except CatalogError as exc:
            raise ValueError(f"kv_cache.num_blocks: auto: {exc}") from None
        if blocks is None:
            raise ValueError(
                f"kv_cache.num_blocks: got 'auto' with cost {self.cost.name!r}, needs a "
                "catalog cost model (cost.name: roofline) or a number of blocks"
            )
        if blocks <= kv.reserved_blocks:
            raise ValueError(
                f"kv_cache.num_blocks: auto gives {blocks} blocks, not more than "
                f"reserved_blocks ({kv.reserved_blocks}): no room for any request"
            )
        # frozen: the resolved value (and the memory figures it used) replaces "auto"
        # once, here, before anything reads it; the manifest shows all three
        object.__setattr__(self, "kv_cache", kv.model_copy(update={"num_blocks": blocks, **used}))
        return self

    @field_validator("admission")
    @classmethod
    def _admission_has_an_slo(cls, value: Any, info: ValidationInfo) -> Any:
        slo = info.data.get("slo")
        if value.name == "slo" and slo is not None and slo.ttft_ms is slo.tpot_ms is None:
            raise ValueError(
                "got name 'slo' with neither slo.ttft_ms nor slo.tpot_ms set; "
                "set one of them (ms > 0) or use admission: always"
            )
        return value

    @property
    def base_dir(self) -> Path:
        """Folder that relative paths in the scenario are read from."""
        return self._base_dir

    def replica_specs_named(self) -> list[tuple[str, ReplicaSpec]]:
        """(field-path prefix, spec) of every replica, in order."""
        own = ReplicaSpec(self.scheduler, self.kv_cache, self.cost, self.prefix_cache)
        cluster = self.cluster
        if cluster is None:
            return [("", own)]
        groups = [(f"cluster.groups[{i}].", g) for i, g in enumerate(cluster.groups)]
        if cluster.disaggregation is not None:
            d = cluster.disaggregation
            groups = [
                ("cluster.disaggregation.prefill.", d.prefill),
                ("cluster.disaggregation.decode.", d.decode),
            ]
        if not groups:
            return [("", own)] * cluster.replicas
        out = []
        for where, g in groups:
            spec = ReplicaSpec(
                g.scheduler or own.scheduler,
                g.kv_cache or own.kv_cache,
                g.cost or own.cost,
                g.prefix_cache or own.prefix_cache,
            )
            out += [(where, spec)] * g.count
        return out

    def replica_specs(self) -> list[ReplicaSpec]:
        """What every replica is made of, in order (one without ``cluster``)."""
        return [spec for _, spec in self.replica_specs_named()]

    def expand(self) -> list[Scenario]:
        """The resolved scenario of every variant (just ``[self]`` without variants)."""
        if self._expanded is None:
            self._expanded = self._expand()
        return list(self._expanded)

    def _expand(self) -> list[Scenario]:
        variants = list(self.variants)
        if self.grid is not None:
            variants.extend(self.grid.variants())
        if self.whatif is not None:
            variants.extend(self.whatif.variants(self.cost.jitter is not None))
        if not variants:
            return [self]
        out = []
        labels = set()
        for i, var in enumerate(variants):
            if var.label in labels:
                raise ScenarioError(f"variants[{i}].label: got {var.label!r}, must be unique")
            labels.add(var.label)
            raw = self._base_raw()
            for path, value in var.set.items():
                set_path(raw, path, value, where=f"variants[{i}].set")
            raw["label"] = var.label
            out.append(_validate(raw, self._base_dir, prefix=f"variants[{var.label!r}]"))
        return out

    def with_values(self, changes: dict[str, Any], where: str = "--set") -> Scenario:
        """This scenario, without its variants, with every dotted path of *changes* set
        to its value (as ``--set`` does) and validated again."""
        raw = self._base_raw()
        for path, value in changes.items():
            set_path(raw, path, value, where=where)
        return _validate(raw, self._base_dir)

    def base(self) -> Scenario:
        """This scenario without its variants (``variants``, ``grid``, ``whatif``): what
        a sweep or a capacity search varies."""
        return self.with_values({})

    def _base_raw(self) -> dict[str, Any]:
        """A copy of the scenario as written, without the blocks that make variants."""
        raw = copy.deepcopy(self._raw)
        for block in VARIANT_BLOCKS:
            raw.pop(block, None)
        return raw

    def resolved(self) -> dict[str, Any]:
        """The full scenario as plain data (defaults filled in), for manifests."""
        return self.model_dump(mode="json", exclude={"quick", *VARIANT_BLOCKS})


VARIANT_BLOCKS = ("variants", "grid", "whatif")
"""The blocks of a scenario that make variants (each variant is the scenario without them,
plus its own changes)."""


def _validate(raw: dict[str, Any], base_dir: Path, prefix: str = "") -> Scenario:
    try:
        data = apply_engine(raw)
    except ScenarioError as exc:
        raise ScenarioError(f"{prefix}.{exc}" if prefix else str(exc)) from None
    try:
        scenario = Scenario.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise from_validation_error(exc, prefix) from None
    scenario._base_dir = base_dir
    scenario._raw = raw
    check_files(scenario.workload, base_dir)
    return scenario


def scenario_from_dict(
    raw: dict[str, Any],
    base_dir: Path | None = None,
    overrides: tuple[str, ...] | list[str] = (),
    quick: bool = False,
) -> Scenario:
    """Validate a scenario given as a mapping (what the YAML file holds)."""
    if not isinstance(raw, dict):
        raise ScenarioError(f"<root>: got {type(raw).__name__}, must be a mapping of fields")
    data = copy.deepcopy(raw)
    changes = [parse_override(text) for text in overrides]
    base = base_dir or Path.cwd()

    def resolve(tree: dict[str, Any]) -> Scenario:
        for path, value in changes:
            set_path(tree, path, copy.deepcopy(value))
        scenario = _validate(tree, base)
        scenario.expand()  # every variant is validated before anything runs
        return scenario

    if quick:
        return resolve(_with_quick(data))
    scenario = resolve(data)
    if raw.get("quick"):
        # The quick run is validated too (with its variants), so a typo inside
        # ``quick:`` fails now rather than only under ``--quick``.
        try:
            resolve(_with_quick(copy.deepcopy(raw)))
        except ScenarioError as exc:
            raise ScenarioError(f"quick: {exc}") from None
    return scenario


def _with_quick(data: dict[str, Any]) -> dict[str, Any]:
    """*data* with its ``quick:`` block merged in."""
    block = data.get("quick") or {}
    if not isinstance(block, dict):
        raise ScenarioError(f"quick: got {block!r}, must be a mapping of overrides")
    return deep_merge(data, block)


def load_scenario(
    path: str | Path, overrides: tuple[str, ...] | list[str] = (), quick: bool = False
) -> Scenario:
    """Read and validate the scenario file at *path* (see the module docstring)."""
    p = Path(path)
    raw = read_yaml(p, "scenario")
    if isinstance(raw, dict):
        raw.setdefault("name", p.stem)
    return scenario_from_dict(raw, p.parent.resolve(), overrides, quick)
