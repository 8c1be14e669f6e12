"""lyra-simpy: a fast, calibrated SimPy simulator of LLM serving systems.

>>> from lyra_simpy import load_scenario, simulate
>>> results = simulate(load_scenario("scenarios/lab02_static_vs_continuous.yaml", quick=True))
>>> results.summary["output_throughput"]  # doctest: +SKIP

The names below are imported when first used (PEP 562), so ``import lyra_simpy`` and
``lyra-simpy --help`` do not pay for NumPy, pydantic and the schema until a command
needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lyra_simpy.capacity import find_capacity
    from lyra_simpy.cost import COST_MODELS, BatchShape, CostModel
    from lyra_simpy.errors import LyraError, ScenarioError
    from lyra_simpy.metrics.io import read_series
    from lyra_simpy.output.writer import run_scenario
    from lyra_simpy.policies import (
        ADMISSIONS,
        SCHEDULERS,
        Admission,
        BatchPlan,
        EngineView,
        Scheduler,
    )
    from lyra_simpy.processes import PROCESSES, Cluster
    from lyra_simpy.scenario import Scenario, load_scenario, scenario_from_dict
    from lyra_simpy.simulation import Results, simulate
    from lyra_simpy.sweep import load_sweep, load_table, run_sweep

_WHERE = {
    "find_capacity": "lyra_simpy.capacity",
    "COST_MODELS": "lyra_simpy.cost",
    "BatchShape": "lyra_simpy.cost",
    "CostModel": "lyra_simpy.cost",
    "LyraError": "lyra_simpy.errors",
    "ScenarioError": "lyra_simpy.errors",
    "ADMISSIONS": "lyra_simpy.policies",
    "SCHEDULERS": "lyra_simpy.policies",
    "Admission": "lyra_simpy.policies",
    "BatchPlan": "lyra_simpy.policies",
    "EngineView": "lyra_simpy.policies",
    "Scheduler": "lyra_simpy.policies",
    "PROCESSES": "lyra_simpy.processes",
    "Cluster": "lyra_simpy.processes",
    "run_scenario": "lyra_simpy.output.writer",
    "Scenario": "lyra_simpy.scenario",
    "load_scenario": "lyra_simpy.scenario",
    "scenario_from_dict": "lyra_simpy.scenario",
    "Results": "lyra_simpy.simulation",
    "simulate": "lyra_simpy.simulation",
    "load_sweep": "lyra_simpy.sweep",
    "load_table": "lyra_simpy.sweep",
    "run_sweep": "lyra_simpy.sweep",
    "read_series": "lyra_simpy.metrics.io",
}
"""Public name → the module that defines it."""

__all__ = [
    "ADMISSIONS",
    "COST_MODELS",
    "PROCESSES",
    "SCHEDULERS",
    "Admission",
    "BatchPlan",
    "BatchShape",
    "Cluster",
    "CostModel",
    "EngineView",
    "LyraError",
    "Results",
    "Scenario",
    "ScenarioError",
    "Scheduler",
    "find_capacity",
    "load_scenario",
    "load_sweep",
    "load_table",
    "read_series",
    "run_scenario",
    "run_sweep",
    "scenario_from_dict",
    "simulate",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'lyra_simpy' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # imported once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
