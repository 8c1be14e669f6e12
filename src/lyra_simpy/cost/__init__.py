"""Cost models: iteration time of a batch. ``COST_MODELS`` maps the YAML ``name`` to
what builds the model from its config (and the replica's largest batch); ``CostConfig``
is the config union beside it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from lyra_simpy.cost.base import BatchShape, CostModel
from lyra_simpy.cost.linear import LinearCost, LinearCostConfig
from lyra_simpy.cost.profiled import ProfileCost, ProfileCostConfig
from lyra_simpy.cost.roofline import RooflineCost, RooflineCostConfig

CostConfig = Annotated[
    LinearCostConfig | RooflineCostConfig | ProfileCostConfig, Field(discriminator="name")
]

COST_MODELS: dict[str, Callable[[Any, int], CostModel]] = {
    "linear": LinearCost,
    "roofline": RooflineCost,
    "profile": ProfileCost,
}

__all__ = [
    "COST_MODELS",
    "BatchShape",
    "CostConfig",
    "CostModel",
    "LinearCost",
    "LinearCostConfig",
    "ProfileCost",
    "ProfileCostConfig",
    "RooflineCost",
    "RooflineCostConfig",
]
