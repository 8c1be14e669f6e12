"""KV block accounting."""

from __future__ import annotations

import pytest

from lyra_simpy.engine.kv import BlockPool, KVCacheConfig, blocks_for
from lyra_simpy.errors import SimulationError


@pytest.mark.parametrize(
    ("tokens", "bs", "blocks"),
    [(0, 16, 0), (1, 16, 1), (16, 16, 1), (17, 16, 2), (33, 16, 3), (5, 1, 5), (100, 7, 15)],
)
def test_blocks_for(tokens, bs, blocks):
    assert blocks_for(tokens, bs) == blocks


def test_pool_counts_and_peak():
    pool = BlockPool(10, 16)
    pool.allocate(4)
    pool.allocate(6)
    assert pool.used == 10
    assert pool.free == 0
    pool.release(7)
    assert pool.free == 7
    assert pool.peak_used == 10


def test_over_capacity_raises():
    pool = BlockPool(10, 16)
    pool.allocate(8)
    with pytest.raises(SimulationError, match="over capacity: 11 blocks in use > 10"):
        pool.allocate(3)
    assert pool.used == 8  # a failed allocation changes nothing


def test_double_release_raises():
    pool = BlockPool(4, 16)
    pool.allocate(2)
    with pytest.raises(SimulationError, match="released twice"):
        pool.release(3)


def test_config_defaults_block_size_16():
    assert KVCacheConfig(num_blocks=3).block_size == 16
