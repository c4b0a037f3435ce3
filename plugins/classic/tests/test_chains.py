"""The classic policies on prefix chains: a chain's tail leaves before its
head, through the same runtime the simulator and the engine use."""

from __future__ import annotations

import pytest

from spfcore.testing import MiniCache

POLICIES = ["arc", "gdsf", "lirs", "s3fifo", "sieve", "twoq"]


@pytest.mark.parametrize("policy", POLICIES)
def test_tail_leaves_before_head(policy):
    c = MiniCache(policy, num_blocks=40)
    chains = {s: [f"{s}{d}" for d in range(6)] for s in "abcdefgh"}
    evicted = []
    for rnd in range(3):
        for s, keys in chains.items():
            c.serve(keys[: 3 + (rnd + ord(s)) % 4])
            evicted += c.evicted[len(evicted):]
            cached = c.cached()
            for k in cached:  # every cached block's parent is cached: no orphan tail
                d = int(k[1:])
                assert d == 0 or f"{k[0]}{d - 1}" in cached, (policy, k, sorted(cached))
    assert evicted  # the pool was under pressure


@pytest.mark.parametrize("policy", POLICIES)
def test_hits_a_repeated_chain(policy):
    c = MiniCache(policy, num_blocks=12)
    c.serve(["a0", "a1", "a2"])
    c.serve(["b0", "b1", "b2"])
    c.serve(["a0", "a1", "a2"])
    assert c.hits == [0, 0, 3]


@pytest.mark.parametrize("policy, opt", [("s3fifo", "ghost_size_ratio"), ("twoq", "a_out_size_ratio")])
def test_an_infinite_ghost_ratio_is_a_bad_option(policy, opt):
    """inf passed the >= 0 check and failed the arm in __init__ ('cannot convert float NaN to integer')."""
    from spfcore.registry import PolicyConfigError

    with pytest.raises(PolicyConfigError, match=f"'{opt}' must be < inf"):
        MiniCache(policy, 16, options={opt: "inf"})
