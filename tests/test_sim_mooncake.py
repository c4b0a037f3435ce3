"""The simulator against an independent block-level replay of the Mooncake
conversation trace (../shared/traces/SOURCE.md), 512 tokens per block,
one request at a time.

That replay inserts every hash id of a request (the last, partial block
included), lets a request hit its whole cached chain, and has no output
blocks and no null block. The simulator follows vLLM instead: the partial
last block is never cached (it fills with output tokens and then holds a
unique hash), hits stop at (prompt_len - 1) // 512 blocks (last-token rule),
decode blocks take cache space, and num_blocks includes the null block (so
capacity C is num_blocks = C + 1). Measured differences: infinite 0.3660 vs
0.3664 (last-token rule), LRU +0.002 at 9,139 blocks, Belady -0.007 at 1,827
blocks (output blocks compete for the small cache) - all within 0.01.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spfcore import registry
from spfcore.sim import ceilings, prepare, simulate
from spfcore.workloads.traces import read_mooncake

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake_conversation_trace.jsonl"  # ../shared beside the checkout
HAVE_BELADY = any(p.name == "belady_oracle" and p.status == "ok" for p in registry.discover())


@pytest.mark.skipif(not TRACE.exists(), reason="shared Mooncake trace not present")
def test_mooncake_reference_replay():
    prep = prepare(read_mooncake(TRACE), 512)
    inf = ceilings(prep, num_blocks=9140, block_size=512, belady="none")["infinite"]
    assert inf["block_hit_rate"] == pytest.approx(0.3664, abs=0.01)
    ref = {(9139, "lru"): 0.1958, (1827, "lru"): 0.0525}
    if HAVE_BELADY:
        ref.update({(9139, "belady_oracle"): 0.3664, (1827, "belady_oracle"): 0.2464})
    for (cap, arm), expect in ref.items():
        rec = simulate(prep, arm, num_blocks=cap + 1, block_size=512)
        assert rec["block_refs"] == 288_500
        assert rec["block_hit_rate"] == pytest.approx(expect, abs=0.01), (cap, arm)
