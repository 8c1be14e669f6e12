"""Scheduling policies. ``SCHEDULERS`` maps the YAML ``scheduler.name`` to a class."""

from __future__ import annotations

from typing import Any

from lyra_simpy.policies.base import BatchPlan, EngineView, Scheduler
from lyra_simpy.policies.chunked import ChunkedPrefill, ChunkedPrefillConfig
from lyra_simpy.policies.continuous import ContinuousBatching, ContinuousConfig
from lyra_simpy.policies.prefill_first import PrefillFirst, PrefillFirstConfig
from lyra_simpy.policies.static import StaticBatching, StaticConfig

SCHEDULERS: dict[str, type[Any]] = {
    "static": StaticBatching,
    "continuous": ContinuousBatching,
    "chunked_prefill": ChunkedPrefill,
    "prefill_first": PrefillFirst,
}

__all__ = [
    "SCHEDULERS",
    "BatchPlan",
    "ChunkedPrefill",
    "ChunkedPrefillConfig",
    "ContinuousBatching",
    "ContinuousConfig",
    "EngineView",
    "PrefillFirst",
    "PrefillFirstConfig",
    "Scheduler",
    "StaticBatching",
    "StaticConfig",
]
