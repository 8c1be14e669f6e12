"""lyra-simpy: a fast, calibrated SimPy simulator of LLM serving systems.

>>> from lyra_simpy import load_scenario, simulate
>>> results = simulate(load_scenario("scenarios/lab02_static_vs_continuous.yaml", quick=True))
>>> results.summary["output_throughput"]  # doctest: +SKIP
"""

from lyra_simpy.capacity import find_capacity
from lyra_simpy.cost import COST_MODELS, BatchShape, CostModel
from lyra_simpy.errors import LyraError, ScenarioError
from lyra_simpy.policies import ADMISSIONS, SCHEDULERS, Admission, BatchPlan, EngineView, Scheduler
from lyra_simpy.runner import run_scenario
from lyra_simpy.scenario import Scenario, load_scenario, scenario_from_dict
from lyra_simpy.simulation import Results, simulate
from lyra_simpy.sweep import load_sweep, load_table, run_sweep

__all__ = [
    "ADMISSIONS",
    "COST_MODELS",
    "SCHEDULERS",
    "Admission",
    "BatchPlan",
    "BatchShape",
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
    "run_scenario",
    "run_sweep",
    "scenario_from_dict",
    "simulate",
]
