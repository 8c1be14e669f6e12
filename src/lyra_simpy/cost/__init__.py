"""Cost models: iteration time of a batch. ``COST_MODELS`` maps the YAML ``name``."""

from __future__ import annotations

from typing import Any

from lyra_simpy.cost.base import BatchShape, CostModel
from lyra_simpy.cost.linear import LinearCost, LinearCostConfig
from lyra_simpy.cost.profiled import ProfileCost, ProfileCostConfig
from lyra_simpy.cost.roofline import RooflineCost, RooflineCostConfig

COST_MODELS: dict[str, type[Any]] = {
    "linear": LinearCost,
    "roofline": RooflineCost,
    "profile": ProfileCost,
}

__all__ = [
    "COST_MODELS",
    "BatchShape",
    "CostModel",
    "LinearCost",
    "LinearCostConfig",
    "ProfileCost",
    "ProfileCostConfig",
    "RooflineCost",
    "RooflineCostConfig",
]
