"""Block keys (spfcore.keys): 128-bit chained digests, collision-free for any
input, equal in every process; the collision reproducer through the simulator."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import spfcore
from spfcore.keys import ROOT, chain_keys, chain_keys_from_ids, decode_key
from spfcore.sim import prepare, simulate
from spfcore.workloads import block_keys
from spfcore.workloads.model import Request, Workload
from spfcore.workloads.traces import TraceError, read_jsonl, read_mooncake

M61 = 2**61 - 1  # Python's hash modulus for ints


# ------------------------------------------------------------------ the reproducer
def _mooncake(tmp_path: Path, *id_lists, input_length=1536, output_length=4) -> Path:
    p = tmp_path / "mc.jsonl"
    p.write_text("".join(json.dumps({"timestamp": i, "input_length": input_length, "output_length": output_length,
                                     "hash_ids": ids}) + "\n" for i, ids in enumerate(id_lists)))
    return p


def test_python_hash_really_collides_on_these_ids():
    """The premise: the old keys, ``hash((parent, id))``, are equal for both requests' first two blocks."""
    a, b = [0, 1, 2], [M61, M61 + 1, 3]
    old = lambda ids: [p := hash((None, ids[0])), hash((p, ids[1]))]  # noqa: E731
    assert old(a) == old(b)
    assert chain_keys_from_ids(a)[:2] != chain_keys_from_ids(b)[:2]


@pytest.mark.parametrize("second", [
    [M61, M61 + 1, 3],  # equal to [0, 1, ...] modulo 2**61 - 1 (the issue)
    [2**64, 2**64 + 1, 3],  # equal modulo 2**64
    [2 * M61, 3 * M61 + 1, 3],
])
def test_reproducer_no_false_prefix_hits(tmp_path, second):
    """Two Mooncake requests [0, 1, 2] and ids equal to them modulo 2**61-1 (or
    2**64), 1536 tokens each, 512-token blocks, 9 blocks, lru: no hit (was
    [0, 1024] with hash()-chained keys)."""
    path = _mooncake(tmp_path, [0, 1, 2], second)
    wl = read_mooncake(path)
    assert [r.hash_ids for r in wl.requests] == [(0, 1, 2), tuple(second)]
    rec = simulate(wl, "lru", num_blocks=9, block_size=512)
    assert [r["cached_tokens"] for r in rec["requests"]] == [0, 0]
    assert rec["hit_blocks"] == 0
    # the materialized replay (tokens drawn per id) agrees
    mat = read_mooncake(path, tokens_per_block=32)
    rec = simulate(mat, "lru", num_blocks=9, block_size=32)
    assert [r["cached_tokens"] for r in rec["requests"]] == [0, 0]


def test_reproducer_control_equal_ids_do_hit(tmp_path):
    """The same two-request replay with equal first ids hits (so the test above can fail)."""
    wl = read_mooncake(_mooncake(tmp_path, [0, 1, 2], [0, 1, 3]))
    rec = simulate(wl, "lru", num_blocks=9, block_size=512)
    assert [r["cached_tokens"] for r in rec["requests"]] == [0, 1024]


# ------------------------------------------------------------------ adversarial ids
ADVERSARIAL = list(dict.fromkeys([  # distinct values
    0, 1, 2, -1, -2,  # hash(-1) == hash(-2) in CPython
    M61, M61 + 1, 2 * M61, -M61,  # equal to 0, 1, 0, 0 modulo 2**61 - 1
    2**62, 2**63 - 1, 2**63, 2**63 + 1, -(2**63), -(2**63) - 1,  # int64 edges
    2**64, 2**64 + 1, 2**64 + 5, 2**64 - 1, -(2**64),  # equal modulo 2**64
    255, 256, -255, -256, 2**100, -(2**100), 2**100 + 1, 10**400,  # 10**400: beyond int->str limits
]))


def test_adversarial_single_ids_all_distinct():
    keys = [chain_keys_from_ids([b])[0] for b in ADVERSARIAL]
    assert len(set(keys)) == len(ADVERSARIAL)
    assert all(0 <= k < 2**128 for k in keys)


def test_adversarial_pairs_distinct_chains_distinct_keys():
    chains = [(a, b) for a in ADVERSARIAL[:12] for b in ADVERSARIAL]
    keys = {tuple(chain_keys_from_ids(c)) for c in chains}
    assert len({k[1] for k in keys}) == len(chains)  # every two-block chain its own key
    assert len({k[0] for k in keys}) == 12


def test_plain_and_mixed_id_lists_encode_alike():
    """A list of plain int64-range ints takes a batched path, any other list a
    per-id one; both give the same key for the same id (int64 edges included)."""
    for b in (0, -1, 2**63 - 1, -(2**63), -128, 127, 255):
        assert chain_keys_from_ids([b]) == chain_keys_from_ids([b, 2**64])[:1] == chain_keys_from_ids([np.int64(b)])
        assert chain_keys_from_ids([b, 3])[1] == chain_keys_from_ids([b, np.int64(3)])[1]


def test_equal_chains_equal_keys_and_zero_forms():
    assert chain_keys_from_ids([0, 2**100, -5]) == chain_keys_from_ids((0, 2**100, -5))
    assert chain_keys_from_ids([-0]) == chain_keys_from_ids([0])
    assert chain_keys_from_ids([np.int64(7), np.uint64(2**64 - 1)]) == chain_keys_from_ids([7, 2**64 - 1])
    assert chain_keys_from_ids([0]) != chain_keys_from_ids([0, 0])[1:]


@pytest.mark.parametrize("bad", [False, True, 0.0, 1.5, "1", None])
def test_non_int_ids_are_refused(bad):
    with pytest.raises(TypeError, match="block ids must be ints"):
        chain_keys_from_ids([1, bad])


def test_same_id_after_a_different_prefix_differs():
    a, b = chain_keys_from_ids([1, 9]), chain_keys_from_ids([2, 9])
    assert a[1] != b[1]
    assert chain_keys_from_ids([9], parent=a[0]) == a[1:]
    assert chain_keys_from_ids([9]) != a[1:]  # depth 0 (ROOT parent) differs from any chain position


def test_token_content_never_equals_id_content():
    # same numbers, same bytes (8 zero bytes) except for the content tag
    assert chain_keys([0], 1) != chain_keys_from_ids([0])
    for n in (0, 1, 7, 2**62, -3):
        assert chain_keys([n], 1) != chain_keys_from_ids([n])
    p = chain_keys_from_ids([4])[0]
    assert chain_keys([5], 1, parent=p) != chain_keys_from_ids([5], parent=p)
    assert decode_key(None, "0", 0) not in {chain_keys([0], 1)[0], chain_keys_from_ids([0])[0]}


def test_token_ids_must_fit_int64():
    assert chain_keys([2**63 - 1, -(2**63)], 1)  # edges fit
    with pytest.raises(ValueError, match="does not fit in a signed 64-bit"):
        chain_keys([1, 2**63], 2)
    with pytest.raises(ValueError, match="does not fit in a signed 64-bit"):
        chain_keys([-(2**63) - 1], 1)
    with pytest.raises(TypeError, match="token ids must be ints"):
        chain_keys([1, 2.0], 2)
    assert chain_keys([1, 2, 2**70], 2) == chain_keys([1, 2], 2)  # a partial block's tokens are not read


def test_token_chain_shapes_and_errors():
    toks = list(range(3, 3 + 50))
    assert len(chain_keys(toks, 16)) == 3 and chain_keys(toks[:15], 16) == []
    assert chain_keys(toks, 16) == chain_keys(tuple(toks), 16) == chain_keys(np.array(toks), 16)
    with pytest.raises(ValueError, match="block_size"):
        chain_keys(toks, 0)
    for bad in (-1, 2**128, 1.0, True):
        with pytest.raises(ValueError, match="parent"):
            chain_keys(toks, 16, parent=bad)
    with pytest.raises(ValueError, match="parent"):
        chain_keys_from_ids([1], parent=-5)


def test_decode_keys_unique_per_request_and_depth():
    p = chain_keys_from_ids([1])[0]
    keys = {decode_key(p, rid, d) for rid in ("a", "b", "a\x00", "ab", "mc-1", "mc-10") for d in (0, 1, 2, 256)}
    assert len(keys) == 24
    assert decode_key(p, "a", 1) == decode_key(p, "a", 1) != decode_key(None, "a", 1)
    with pytest.raises(TypeError):
        decode_key(p, 5, 1)
    with pytest.raises(ValueError, match="depth"):
        decode_key(p, "a", -1)


def test_keys_survive_json():
    keys = chain_keys_from_ids([1, 2**100])
    assert max(keys) > 2**64
    assert json.loads(json.dumps(keys)) == keys


def test_root_marker_is_a_16_byte_constant():
    assert len(ROOT) == 16
    assert chain_keys_from_ids([5]) == chain_keys_from_ids([5], parent=None)
    assert chain_keys_from_ids([5]) != chain_keys_from_ids([5], parent=int.from_bytes(ROOT, "big") ^ 1)


# ------------------------------------------------------------------ properties
ids = st.one_of(st.integers(-3, 3), st.integers(-(2**70), 2**70), st.sampled_from(ADVERSARIAL))
chains = st.lists(ids, min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(chains, chains)
def test_id_keys_equal_exactly_when_prefixes_equal(a, b):
    ka, kb = chain_keys_from_ids(a), chain_keys_from_ids(b)
    assert len(ka) == len(a)
    for i in range(min(len(a), len(b))):
        assert (ka[i] == kb[i]) == (a[: i + 1] == b[: i + 1])


@settings(max_examples=200, deadline=None)
@given(chains, st.integers(0, 5))
def test_id_keys_prefix_and_continuation(a, m):
    k = chain_keys_from_ids(a)
    m = min(m, len(a))
    assert chain_keys_from_ids(a[:m]) == k[:m]
    assert chain_keys_from_ids(a[m:], parent=k[m - 1] if m else None) == k[m:]


tokens = st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(0, 5), min_size=0, max_size=24)


@settings(max_examples=300, deadline=None)
@given(tokens, tokens, st.integers(1, 4))
def test_token_keys_equal_exactly_when_prefixes_equal(a, b, bs):
    ka, kb = chain_keys(a, bs), chain_keys(b, bs)
    assert len(ka) == len(a) // bs
    for i in range(min(len(ka), len(kb))):
        assert (ka[i] == kb[i]) == (a[: (i + 1) * bs] == b[: (i + 1) * bs])


@settings(max_examples=200, deadline=None)
@given(tokens, st.integers(1, 4), st.integers(0, 6))
def test_token_keys_prefix_and_continuation(t, bs, m):
    k = chain_keys(t, bs)
    m = min(m, len(k))
    assert chain_keys(t[: m * bs], bs) == k[:m]
    assert chain_keys(t[: m * bs + bs - 1], bs) == k[:m]  # a trailing partial block adds nothing
    assert chain_keys(t[m * bs:], bs, parent=k[m - 1] if m else None) == k[m:]


# ------------------------------------------------------------------ processes, workloads, traces
_PROBE = ("from spfcore.keys import chain_keys, chain_keys_from_ids, decode_key; "
          "k = chain_keys_from_ids([0, 2**61 - 1, -1, 2**100]); "
          "print(k, chain_keys(list(range(40)), 16, k[0]), decode_key(k[1], 'mc-7', 3))")


def test_keys_identical_across_processes_and_hash_seeds():
    root = str(Path(spfcore.__file__).resolve().parents[1])
    outs = set()
    for seed in ("0", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=os.pathsep.join(
            [root, os.environ.get("PYTHONPATH", "")]))
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, check=True)
        outs.add(out.stdout.strip())
    k = chain_keys_from_ids([0, 2**61 - 1, -1, 2**100])
    here = f"{k} {chain_keys(list(range(40)), 16, k[0])} {decode_key(k[1], 'mc-7', 3)}"
    assert outs == {here}


def test_known_key_values():
    """Pinned values: changing the encoding (and so every key) must be deliberate."""
    assert chain_keys_from_ids([0, 1, 2]) == [13382924829544244858741167987805603868,
                                              303896869836172519423761683557877550285,
                                              317950282620050958885145394198688740082]
    assert chain_keys(list(range(10)), 3) == [251450054021426456811830102739572716542,
                                              196559737067698105044474801060250512378,
                                              98647872815238526557444278577062526789]


def test_block_keys_of_requests_and_prepared_decode_keys():
    r = Request("r", 0.0, (), 700, hash_ids=(2**100, -1), hash_block_tokens=512, num_prompt_tokens=1000)
    assert block_keys(r, 512) == tuple(chain_keys_from_ids([2**100, -1]))
    prep = prepare(Workload("w", {}, [r]), 512)
    (dk,) = prep.decode_keys  # blocks 1 .. (1000 + 699) // 512 - 1 = 2 become full in decode
    k0 = prep.full_keys[0][0]
    assert dk == (decode_key(k0, "r", 1), decode_key(decode_key(k0, "r", 1), "r", 2))


@pytest.mark.parametrize("bad, what", [("true", "True (bool)"), ("1.0", "1.0 (float)"), ("-3", "-3 (int)"),
                                       ('"7"', "'7' (str)")])
def test_mooncake_reader_refuses_non_int_ids(tmp_path, bad, what):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
                 f'{{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [1, {bad}]}}\n')
    with pytest.raises(TraceError, match="bad.jsonl:2: field 'hash_ids': expected a list of ints >= 0, "
                                         + re.escape(f"got element 1 = {what}")):
        read_mooncake(p)


def test_mooncake_reader_keeps_huge_ids_exact(tmp_path):
    wl = read_mooncake(_mooncake(tmp_path, [2**100, 2**64 + 3, 7]))
    assert wl.requests[0].hash_ids == (2**100, 2**64 + 3, 7)


@pytest.mark.parametrize("field, bad, what", [
    ("prompt_token_ids", "[5, 9223372036854775808]", r"ints in \[0, 2\*\*63\), got element 1 = 9223372036854775808"),
    ("prompt_token_ids", "[5, true]", r"ints in \[0, 2\*\*63\), got element 1 = True \(bool\)"),
    ("output_token_ids", "[5.0]", r"ints in \[0, 2\*\*63\), got element 0 = 5.0 \(float\)"),
    ("hash_ids", "[1, false]", r"ints >= 0, got element 1 = False \(bool\)"),
])
def test_spfcore_jsonl_reader_refuses_bad_ids(tmp_path, field, bad, what):
    row = {"request_id": "a", "arrival_s": 0, "prompt_token_ids": [5, 6], "output_tokens": 1}
    line = json.dumps(row)[:-1] + f', "{field}": {bad}}}' if field != "prompt_token_ids" else \
        json.dumps(row).replace("[5, 6]", bad)
    p = tmp_path / "x.jsonl"
    p.write_text(line + "\n")
    with pytest.raises(TraceError, match=rf"x.jsonl:1: field '{field}': expected a list of {what}"):
        read_jsonl(p)


def test_token_content_is_int64_little_endian():
    """The documented encoding, independent of the machine's byte order."""
    from hashlib import blake2b

    toks = [1, -2, 2**40]
    data = ROOT + b"T" + b"".join(t.to_bytes(8, "little", signed=True) for t in toks)
    assert chain_keys(toks, 3) == [int.from_bytes(blake2b(data, digest_size=16).digest(), "big")]
    ids = [5, -(2**63) - 1]
    d0 = blake2b(ROOT + b"I" + (5).to_bytes(8, "big"), digest_size=16).digest()
    d1 = blake2b(d0 + b"I" + ids[1].to_bytes(9, "big", signed=True), digest_size=16).digest()
    assert chain_keys_from_ids(ids) == [int.from_bytes(d0, "big"), int.from_bytes(d1, "big")]
