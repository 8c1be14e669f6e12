"""Scheduling and admission policies. ``SCHEDULERS`` and ``ADMISSIONS`` map the YAML
``scheduler.name`` and ``admission.name`` to what builds the policy from its config;
``SchedulerConfig`` and ``AdmissionConfig`` are the config unions beside them (a test
checks that each registry's keys are its union's names)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from lyra_simpy.cost.base import CostModel
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
from lyra_simpy.policies.llamacpp import LlamaCppServer
from lyra_simpy.policies.llamacpp_config import LlamaCppConfig
from lyra_simpy.policies.prefill_first import PrefillFirst, PrefillFirstConfig
from lyra_simpy.policies.static import StaticBatching, StaticConfig

SchedulerConfig = Annotated[
    StaticConfig | ContinuousConfig | ChunkedPrefillConfig | PrefillFirstConfig | LlamaCppConfig,
    Field(discriminator="name"),
]
AdmissionConfig = Annotated[AlwaysConfig | SLOAdmissionConfig, Field(discriminator="name")]

SCHEDULERS: dict[str, Callable[[Any], Scheduler]] = {
    "static": StaticBatching,
    "continuous": ContinuousBatching,
    "chunked_prefill": ChunkedPrefill,
    "prefill_first": PrefillFirst,
    "llamacpp": LlamaCppServer,
}

ADMISSIONS: dict[str, Callable[[Any, CostModel, Limits], Admission]] = {
    "always": AlwaysAdmission,
    "slo": SLOAdmission,
}

__all__ = [
    "ADMISSIONS",
    "SCHEDULERS",
    "Admission",
    "AdmissionConfig",
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
    "LlamaCppConfig",
    "LlamaCppServer",
    "PrefillFirst",
    "PrefillFirstConfig",
    "SLOAdmission",
    "SLOAdmissionConfig",
    "Scheduler",
    "SchedulerConfig",
    "StaticBatching",
    "StaticConfig",
]
