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


@pytest.mark.parametrize("policy", POLICIES)
def test_a_hash_cached_in_two_blocks_evicted_twice(policy, monkeypatch):
    """vLLM caches a recomputed block's hash again when its parent was evicted
    but the block itself was not (here bs = 1, every prompt recomputed from
    token 0): one hash in two blocks, both evicted in turn. LIRS kept one ghost
    token per hash and overwrote it: its S then held a ghost no map knew of,
    and the prune that reached it raised KeyError (a workload found by a
    random differential run, shrunk)."""
    from spfcore.sim import prepare, simulate
    from spfcore.workloads.model import Request, Workload

    monkeypatch.setenv("SPFCORE_SIM_REPLAY", "python")
    reqs = [((1, 0, 1, 0, 0, 1, 0, 1), 6, (1, 0, 1, 1, 1, 1)),
            ((0, 1, 1, 1, 1, 1, 0, 1, 0, 0, 1, 0, 1, 1), 5, (1, 1, 1, 1, 1)),
            ((0, 1, 0, 1, 0, 0, 1, 1), 1, ()),
            ((0, 1, 0, 1, 0), 2, ()),
            ((0, 0, 0), 5, ()),
            ((0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1, 1, 1, 0), 3, (1, 1, 0)),
            ((1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 0, 0, 0, 0), 2, ())]
    wl = Workload("dup", {}, [Request(f"r{j}", float(j), p, o, output_token_ids=out)
                              for j, (p, o, out) in enumerate(reqs)])
    rec = simulate(prepare(wl, 1), policy, num_blocks=23, block_size=1)
    assert rec["status"] == "ok" and rec["evictions"] > 0 and rec["num_requests"] == 7


_NO_LEAF = [((1, 1, 0, 0, 1), 6, (1, 0, 1, 1, 0, 1)), ((1, 1), 1, ()),
            ((1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0), 6, (1, 0, 0, 0, 1, 1))]


@pytest.mark.parametrize("policy", ["arc", "gdsf", "lirs", "s3fifo", "sieve", "twoq"])
def test_no_free_leaf_when_a_hash_is_cached_twice(policy, monkeypatch):
    """With a hash cached in two blocks, a free copy whose hash parents a
    block a request holds counts as a parent (children are counted per
    hash), so every free block looked unevictable: the arms failed the cell
    (KeyError(None), IndexError, StopIteration, RuntimeError) and sieve's
    hand looped forever (review 11). Now the victim comes from the copies
    (``ClassicPolicy._victim_among_copies``), as vLLM would evict one."""
    from spfcore.sim import prepare, simulate
    from spfcore.workloads.model import Request, Workload

    from collections import Counter

    from spfcore_classic._base import ClassicPolicy

    monkeypatch.setenv("SPFCORE_SIM_REPLAY", "python")
    taken = []  # (victim's hash, how many resident blocks held it) on the copies' path
    real = ClassicPolicy._victim_among_copies

    def spy(self):
        held = Counter(self.key.values())
        i = real(self)
        taken.append((self.key[i], held[self.key[i]]))
        return i

    monkeypatch.setattr(ClassicPolicy, "_victim_among_copies", spy)
    wl = Workload("dup", {}, [Request(f"r{j}", float(j), p, o, output_token_ids=out)
                              for j, (p, o, out) in enumerate(_NO_LEAF)])
    rec = simulate(prepare(wl, 2), policy, num_blocks=9, block_size=2)
    assert rec["status"] == "ok" and rec["num_requests"] == 3
    assert taken and all(n >= 2 for _, n in taken), taken  # the path ran, and took a copy every time


def test_no_copy_no_victim_raises():
    """Without a hash cached twice there is nothing to fall back on: the
    NoEvictable of the policy's own search stands (a bug, not a workload)."""
    from spfcore_classic._base import NoEvictable
    from spfcore_classic.s3fifo import S3FIFO

    pol = S3FIFO()
    pol._reset(8)
    pol.key.update({1: "a", 2: "b"})
    with pytest.raises(NoEvictable, match="s3fifo: no evictable block .* among 2 resident blocks"):
        pol._victim_among_copies()
