"""frequency: admission after two sightings, lowest count first, LRU on
ties, ghost counts survive eviction and are bounded."""

import pytest

from spfcore import BlockBatch, BlockView, RequestView
from spfcore.registry import PolicyConfigError
from spfcore.testing import MiniCache
from spfcore_frequency import FrequencyParams, FrequencyPolicy

# Pool 4 blocks (each request also holds one hashless block).
#   0..2  [a0] x3        a0 count 3, admitted
#   3     [b0]           b0 count 1, not admitted
#   4     [c0, c1]       victim b0 (LRU would take a0, released earlier); ghost b0 = 1
#   5     [b0]           stored again: 1 + ghost 1 = 2, admitted; victim c1 (count 1,
#                        released before c0)
#   6     [d0, d1]       victims c0 (not admitted), then b0 (count 2 < a0's 3)
SCRIPT = [["a0"], ["a0"], ["a0"], ["b0"], ["c0", "c1"], ["b0"], ["d0", "d1"]]


def test_admission_counts_and_ghosts():
    c = MiniCache("frequency", 4)
    assert [c.serve(k) for k in SCRIPT] == [[], [], [], [], ["b0"], ["c1"], ["c0", "b0"]]
    pol = c.rt.pm.get_plugin("frequency")
    assert pol.count == {"a0": 3, "d0": 1, "d1": 1}
    assert list(pol.ghost.items()) == [("c1", 1), ("c0", 1), ("b0", 2)]


def test_lru_on_the_same_script():
    c = MiniCache("lru", 4)
    # a0 (released first) goes; b0 then hits at arrival 5.
    assert [c.serve(k) for k in SCRIPT][4:] == [["a0"], [], ["c1", "c0"]]
    assert c.hits == [0, 1, 1, 0, 0, 1, 0]


def test_without_ghosts_a_returning_block_is_not_admitted():
    c = MiniCache("frequency", 4, options={"ghost_factor": "0"})
    for k in SCRIPT[:6]:
        c.serve(k)
    assert c.rt.pm.get_plugin("frequency").count["b0"] == 1


def test_min_count_one_is_lfu_without_admission():
    c = MiniCache("frequency", 4, options={"min_count": "1"})
    # b0 (count 1) still goes before a0 (count 3), now by score instead of tier.
    assert [c.serve(k) for k in SCRIPT][4] == ["b0"]


def test_ghost_list_is_bounded_lru():
    p = FrequencyPolicy(FrequencyParams(ghost_factor=1))
    p.spfcore_cache_configured(num_blocks=2, block_size=4)
    r = RequestView("r", None, 0, 0.0, 13, ("k1", "k2", "k3"))
    p.spfcore_blocks_stored(r, BlockBatch.of([BlockView(k, d, None, 4, None, "r", 1, 0.0, 0.0)
                                              for d, k in enumerate(r.block_keys)]), 0.0)
    p.spfcore_blocks_hit(r, BlockBatch.of([BlockView("k1", 0, None, 4, None, "r", 2, 0.0, 0.0)]), 0.0)
    p.spfcore_blocks_evicted(["k1", "k2", "k3"], 0.0)
    assert list(p.ghost.items()) == [("k2", 1), ("k3", 1)]  # k1 (count 2) aged out


def test_bad_option():
    with pytest.raises(PolicyConfigError, match=r"policy 'frequency': 'min_count' must be >= 1"):
        MiniCache("frequency", 4, options={"min_count": "0"})
