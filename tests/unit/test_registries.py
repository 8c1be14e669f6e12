"""Every registry's keys equal the names of its config union (STYLE §4, §5)."""

from __future__ import annotations

import types
import typing

import pytest

import lyra_simpy
from lyra_simpy import COST_MODELS, SCHEDULERS
from lyra_simpy.cluster.routing import ROUTERS, RouterConfig
from lyra_simpy.cost import LinearCost, LinearCostConfig
from lyra_simpy.policies import ADMISSIONS, Limits
from lyra_simpy.policies.prefix_cache import PREFIX_CACHES, PrefixCacheConfig
from lyra_simpy.presets import ENGINES, EngineConfig
from lyra_simpy.processes import PROCESSES, ProcessConfig
from lyra_simpy.scenario import AdmissionConfig, CostConfig, SchedulerConfig


def union_names(annotated: object) -> list[str]:
    """The ``name`` literal of every member of ``Annotated[A | B | ..., Field(...)]``."""
    inner = typing.get_args(annotated)[0]
    origin = typing.get_origin(inner)
    members = typing.get_args(inner) if origin in (typing.Union, types.UnionType) else (inner,)
    names = []
    for cls in members:
        (literal,) = typing.get_args(cls.model_fields["name"].annotation)
        assert cls.model_fields["name"].default == literal
        names.append(literal)
    return names


@pytest.mark.parametrize(
    ("union", "registry"),
    [
        (SchedulerConfig, SCHEDULERS),
        (CostConfig, COST_MODELS),
        (AdmissionConfig, ADMISSIONS),
        (EngineConfig, ENGINES),
        (RouterConfig, ROUTERS),
        (PrefixCacheConfig, PREFIX_CACHES),
        (ProcessConfig, PROCESSES),
    ],
    ids=["scheduler", "cost", "admission", "engine", "router", "prefix_cache", "process"],
)
def test_union_names_equal_registry_keys(union, registry):
    names = union_names(union)
    assert len(names) == len(set(names))
    assert set(names) == set(registry)


def test_scheduler_registry_classes_take_their_config():
    for name, cls in SCHEDULERS.items():
        (config_cls,) = [
            c
            for c in typing.get_args(typing.get_args(SchedulerConfig)[0])
            if c.model_fields["name"].default == name
        ]
        sched = cls(config_cls())
        assert hasattr(sched, "plan")
        assert hasattr(sched, "refusal")


def test_admission_registry_classes_take_their_config():
    cost = LinearCost(LinearCostConfig(), 1)
    for name, cls in ADMISSIONS.items():
        (config_cls,) = [
            c
            for c in typing.get_args(typing.get_args(AdmissionConfig)[0])
            if c.model_fields["name"].default == name
        ]
        policy = cls(config_cls(), cost, Limits(100.0, 20.0, 4, 64))
        assert hasattr(policy, "decide")
        assert isinstance(policy.admits_all, bool)


def test_public_api():
    assert set(lyra_simpy.__all__) >= {
        "simulate",
        "load_scenario",
        "Scenario",
        "Results",
        "SCHEDULERS",
        "COST_MODELS",
        "Scheduler",
        "CostModel",
        "ScenarioError",
        "ADMISSIONS",
        "Admission",
        "PROCESSES",
        "Cluster",
    }
    for name in lyra_simpy.__all__:
        assert getattr(lyra_simpy, name) is not None


def test_the_package_root_imports_its_names_only_when_used():
    """``import lyra_simpy`` and ``lyra-simpy --help`` load neither NumPy nor pydantic
    (the names are looked up on first use, PEP 562), and every public name resolves."""
    import subprocess
    import sys

    code = (
        "import sys, lyra_simpy.cli\n"
        "heavy = [m for m in ('numpy', 'pydantic', 'simpy', 'scipy') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
    assert set(lyra_simpy.__all__) == set(lyra_simpy._WHERE)
    assert "simulate" in dir(lyra_simpy)
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = lyra_simpy.nope  # type: ignore[attr-defined]
