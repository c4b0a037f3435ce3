"""Every classic arm's compiled replay (spfcore.sim._replay_<arm>_nb) against its hooks where
block keys repeat within a prompt (flat keys: a key per token value, not chained hashes), so a
key can be its own parent and a lookup can find a block twice: the same cell and victims, the
same KeyError, or, where no free block is a leaf even among copies (the plugin raises
NoEvictable), the same PolicyError (the kernels' NO_VICTIM status)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings

from spfcore.runtime import PolicyError
from spfcore.sim import prepare, simulator
from tests.test_sim_compiled import _flat_keys, compiled, reference, strip
from tests.test_sim_compiled_s3fifo import flat_workload

pytest.importorskip("spfcore_classic")

CLASSIC = ("sieve", "twoq", "s3fifo", "gdsf", "arc", "lirs")


@pytest.mark.parametrize("arm", CLASSIC)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.function_scoped_fixture])
@given(case=flat_workload())
def test_keys_repeated_within_a_prompt(monkeypatch, arm, case):
    wl, bs, extra, _ = case
    monkeypatch.setattr(simulator, "block_keys", _flat_keys)
    prep = prepare(wl, bs)
    nb = max(prep.blocks_needed) + 1 + extra
    try:
        ref, ref_victims = reference(monkeypatch, prep, nb, bs, arm)
    except KeyError as exc:
        event("a lookup finds a block twice")
        with pytest.raises(KeyError, match=str(exc.args[0])):
            compiled(monkeypatch, prep, nb, bs, arm)
        return
    except PolicyError as exc:
        assert "NoEvictable" in str(exc)
        event("no evictable block")
        with pytest.raises(PolicyError) as got:
            compiled(monkeypatch, prep, nb, bs, arm)
        assert str(got.value) == str(exc)  # the runtime's report of the plugin's NoEvictable
        return
    got, got_victims = compiled(monkeypatch, prep, nb, bs, arm)
    assert strip(got) == strip(ref)
    assert got_victims == ref_victims
