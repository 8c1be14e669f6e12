"""Scheduling and admission policies. ``SCHEDULERS`` and ``ADMISSIONS`` map the YAML
``scheduler.name`` and ``admission.name`` to a class."""

from __future__ import annotations

from typing import Any

from lyra_simpy.policies.admission import (
    Admission,
    AlwaysAdmission,
    AlwaysConfig,
    Decision,
    Limits,
    SLOAdmission,
    SLOAdmissionConfig,
)
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

ADMISSIONS: dict[str, type[Any]] = {
    "always": AlwaysAdmission,
    "slo": SLOAdmission,
}

__all__ = [
    "ADMISSIONS",
    "SCHEDULERS",
    "Admission",
    "AlwaysAdmission",
    "AlwaysConfig",
    "BatchPlan",
    "ChunkedPrefill",
    "ChunkedPrefillConfig",
    "ContinuousBatching",
    "ContinuousConfig",
    "Decision",
    "EngineView",
    "Limits",
    "PrefillFirst",
    "PrefillFirstConfig",
    "SLOAdmission",
    "SLOAdmissionConfig",
    "Scheduler",
    "StaticBatching",
    "StaticConfig",
]
