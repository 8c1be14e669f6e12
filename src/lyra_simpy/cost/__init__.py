"""Cost models: iteration time of a batch. ``COST_MODELS`` maps the YAML ``name``."""

from __future__ import annotations

from typing import Any

from lyra_simpy.cost.base import BatchShape, CostModel
from lyra_simpy.cost.linear import LinearCost, LinearCostConfig

COST_MODELS: dict[str, type[Any]] = {
    "linear": LinearCost,
}

__all__ = ["COST_MODELS", "BatchShape", "CostModel", "LinearCost", "LinearCostConfig"]
