"""Scheduling policies. ``SCHEDULERS`` maps the YAML ``scheduler.name`` to a class."""

from __future__ import annotations

from typing import Any

from lyra_simpy.policies.base import BatchPlan, EngineView, Scheduler
from lyra_simpy.policies.continuous import ContinuousBatching, ContinuousConfig
from lyra_simpy.policies.static import StaticBatching, StaticConfig

SCHEDULERS: dict[str, type[Any]] = {
    "static": StaticBatching,
    "continuous": ContinuousBatching,
}

__all__ = [
    "SCHEDULERS",
    "BatchPlan",
    "ContinuousBatching",
    "ContinuousConfig",
    "EngineView",
    "Scheduler",
    "StaticBatching",
    "StaticConfig",
]
