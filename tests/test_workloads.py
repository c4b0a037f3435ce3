"""Workload generators and cache pressure."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from spfcore.workloads import block_keys
from spfcore.workloads.generators import GENERATORS, defaults, make
from spfcore.workloads.pressure import num_blocks_for_pressure, reusable_prefix_tokens

SMALL = dict(personas=4, prefix_tokens=64, sessions=8, turns=3, query_tokens=16, output_tokens=4)


def digest(wl) -> str:
    h = hashlib.sha256()
    for r in wl.requests:
        h.update(json.dumps([r.request_id, r.arrival_s, list(r.prompt_token_ids), r.output_tokens, r.session_id,
                             r.prefix_group, list(r.output_token_ids)]).encode())
    return h.hexdigest()


def test_personas_seed_shape():
    wl = make("personas", seed=42)
    reqs = wl.requests
    assert len(reqs) == 32 * 4
    assert all(r.num_prompt_tokens == 8192 + 128 and r.output_tokens == 32 for r in reqs)
    # round robin: turn by turn, sessions 0..31; session s uses persona s mod 16
    assert [r.request_id for r in reqs[:3]] == ["s0-t0", "s1-t0", "s2-t0"]
    assert reqs[32].request_id == "s0-t1"
    assert reqs[17].prefix_group == "p1"
    assert reqs[0].prompt_token_ids[:8192] == reqs[16].prompt_token_ids[:8192]  # s0 and s16: persona 0
    assert reqs[0].prompt_token_ids[:8192] != reqs[1].prompt_token_ids[:8192]
    assert reqs[0].prompt_token_ids[8192:] != reqs[32].prompt_token_ids[8192:]  # a fresh query per turn
    toks = [t for r in reqs for t in r.prompt_token_ids]
    assert min(toks) >= 3 and max(toks) < 32000
    assert wl.params == {"generator": "personas", "seed": 42, **defaults("personas")}
    assert all(r.arrival_s == 0.0 for r in reqs)


def test_same_seed_same_requests_in_another_process():
    here = digest(make("multiturn", seed=7, **{k: v for k, v in SMALL.items() if k != "personas"}))
    code = ("import sys; sys.path.insert(0, 'tests'); from test_workloads import digest, SMALL; "
            "from spfcore.workloads.generators import make; "
            "print(digest(make('multiturn', seed=7, **{k: v for k, v in SMALL.items() if k != 'personas'})))")
    env = dict(os.environ, PYTHONHASHSEED="123")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(os.path.dirname(__file__)), check=True)
    assert out.stdout.strip() == here
    assert digest(make("multiturn", seed=8)) != digest(make("multiturn", seed=7))


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_every_generator_is_deterministic_and_records_flags(name):
    a, b = make(name, seed=3), make(name, seed=3)
    assert digest(a) == digest(b)
    assert set(a.params) == {"generator", "seed", *defaults(name)}
    assert len({r.request_id for r in a.requests}) == len(a.requests)


def test_shuffled_keeps_turn_order_within_sessions():
    wl = make("personas", seed=1, order="shuffled", **SMALL)
    turns: dict[str, list[int]] = {}
    for r in wl.requests:
        turns.setdefault(r.session_id, []).append(int(r.request_id.split("-t")[1]))
    assert all(v == list(range(3)) for v in turns.values()) and len(turns) == 8
    assert [r.request_id for r in wl.requests] != [r.request_id for r in make("personas", seed=1, **SMALL).requests]


def test_multiturn_prompt_is_history_plus_output_plus_query():
    wl = make("multiturn", seed=5, personas=2, prefix_tokens=32, sessions=3, turns=3, query_tokens=8, output_tokens=5)
    by_id = {r.request_id: r for r in wl.requests}
    for s in range(3):
        for t in (1, 2):
            prev, cur = by_id[f"s{s}-t{t - 1}"], by_id[f"s{s}-t{t}"]
            assert cur.prompt_token_ids[: prev.num_prompt_tokens + 5] == prev.prompt_token_ids + prev.output_token_ids
            assert cur.num_prompt_tokens == prev.num_prompt_tokens + 5 + 8
    assert by_id["s0-t0"].num_prompt_tokens == 32 + 8


def test_revisit_gap_of_other_traffic():
    wl = make("revisit", seed=0, sessions=2, turns=3, gap_requests=4, prefix_tokens=32, noise_tokens=32)
    ids = [r.request_id for r in wl.requests]
    assert ids.index("s0-t1") - ids.index("s0-t0") == 5  # 4 one-off requests in between
    assert len(ids) == 2 * 3 + 2 * 2 * 4


def test_zipf_skews_persona_popularity():
    wl = make("zipf", seed=0, alpha=3.0, personas=8, sessions=64, turns=1, prefix_tokens=16, query_tokens=4)
    groups = [r.prefix_group for r in wl.requests]
    assert groups.count("p0") > 64 * 0.6  # rank 1 has 1/sum(r^-3) = 0.83 of the mass
    flat = make("zipf", seed=0, alpha=0.0, personas=8, sessions=64, turns=1, prefix_tokens=16, query_tokens=4)
    assert [r.prefix_group for r in flat.requests].count("p0") < 64 * 0.4


def test_arrival_processes():
    wl = make("personas", seed=0, arrival="rate", rate=4, **SMALL)
    assert [r.arrival_s for r in wl.requests[:3]] == [0.0, 0.25, 0.5]
    po = make("personas", seed=0, arrival="poisson", rate=2, **SMALL)
    t = [r.arrival_s for r in po.requests]
    assert t == sorted(t) and t[0] == 0.0 and len(set(t)) == len(t)
    b = make("bursty", seed=0, arrival="rate", rate=0.1, turn_gap_s=1.0, **SMALL)
    assert [r.arrival_s for r in b.requests[:4]] == [0.0, 1.0, 2.0, 10.0]
    assert [r.request_id for r in b.requests[:4]] == ["s0-t0", "s0-t1", "s0-t2", "s1-t0"]


def test_bad_flags_name_the_flag():
    with pytest.raises(ValueError, match="unknown flag.*'persona'"):
        make("personas", seed=0, persona=3)
    with pytest.raises(ValueError, match="flag 'order': bad value 'random'"):
        make("personas", seed=0, order="random")
    with pytest.raises(ValueError, match="flag 'sessions': bad value 'x'"):
        make("personas", seed=0, sessions="x")
    with pytest.raises(ValueError, match="unknown workload generator 'nope'"):
        make("nope", seed=0)


@pytest.mark.parametrize("name, flag, value, words", [
    ("rag", "followup_p", "1.5", "flag 'followup_p': must be in [0, 1], got '1.5'"),
    ("rag", "followup_p", "-0.1", "flag 'followup_p': must be in [0, 1]"),
    ("personas", "rate", "0", "flag 'rate': must be > 0, got '0'"),
    ("personas", "rate", "nan", "flag 'rate': must be a finite number > 0, got 'nan'"),
    ("personas", "rate", "inf", "flag 'rate': must be a finite number > 0"),
    ("scan", "scan_length", "0", "flag 'scan_length': must be >= 1, got '0'"),
    ("scan", "scan_tokens", "0", "flag 'scan_tokens': must be >= 1"),
    ("zipf", "alpha", "nan", "flag 'alpha': must be a finite number >= 0"),
    ("bursty", "turn_gap_s", "-1", "flag 'turn_gap_s': must be >= 0"),
    ("personas", "sessions", "-1", "flag 'sessions': must be >= 0"),
    ("zipf", "personas", "0", "flag 'personas': must be >= 1, got '0'"),
    ("zipf", "personas", "-3", "flag 'personas': must be >= 1, got '-3'"),  # the range the generator needs
    ("multiturn", "output_tokens", "0", "flag 'output_tokens': must be >= 1, got '0'"),
    ("personas", "vocab", "3", "flag 'vocab': must be >= 4, got '3'"),
])
def test_out_of_range_flags_name_the_flag_and_the_range(name, flag, value, words, tmp_path):
    with pytest.raises(ValueError) as err:
        make(name, seed=0, **{flag: value})
    assert words in str(err.value)
    # the command line: a usage error on --set naming the flag and range, exit 2, nothing written
    from click.testing import CliRunner

    from spfcore.cli import main

    out = tmp_path / "never" / "r.json"
    res = CliRunner().invoke(main, ["simulate", "--workload", name, "--set", f"{flag}={value}", "-o", str(out)])
    assert res.exit_code == 2 and "Invalid value for --set" in res.output and words in res.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, flags", [("zipf", {"sessions": 0}), ("personas", {"turns": 0}),
                                         ("rag", {"requests": 0})])
def test_flags_that_give_no_requests_are_refused(name, flags):
    with pytest.raises(ValueError, match=f"workload '{name}': flags give no requests"):
        make(name, seed=0, **flags)


def test_in_range_edges_are_accepted():
    assert len(make("rag", seed=0, followup_p="1", requests=4, docs=8, doc_tokens=16).requests) > 4
    assert make("personas", seed=0, rate="0.001", arrival="rate", **SMALL).requests[1].arrival_s == 1000.0
    assert make("scan", seed=0, scan_length=1, requests=4, scan_every=2, prefix_tokens=16).params["scan_length"] == 1


def test_string_flags_are_converted():
    assert digest(make("personas", seed=2, personas="4", prefix_tokens="64", sessions="8", turns="3",
                       query_tokens="16", output_tokens="4")) == digest(make("personas", seed=2, **SMALL))


def test_pressure_of_the_seed_workload():
    wl = make("personas", seed=42)
    assert reusable_prefix_tokens(wl, 16) == 16 * 8192  # 16 personas x 512 shared blocks x 16 tokens
    assert num_blocks_for_pressure(wl, 2.3, 16) == 3561  # floor(131072 / 36.8)
    assert num_blocks_for_pressure(wl, 1.0, 16) == 8192


def test_pressure_counts_keys_shared_by_two_requests_only():
    wl = make("personas", seed=0, **SMALL)  # 64-token prefixes at block size 16: 4 shared blocks per persona
    assert reusable_prefix_tokens(wl, 16) == 4 * 64
    assert reusable_prefix_tokens(wl, 32) == 4 * 64  # 2 blocks of 32 per persona
    assert len(block_keys(wl.requests[0], 16)) == (64 + 16) // 16
    lonely = make("personas", seed=0, personas=1, sessions=1, turns=1, prefix_tokens=64)
    with pytest.raises(ValueError, match="no reusable prefix"):
        num_blocks_for_pressure(lonely, 2.0, 16)
    with pytest.raises(ValueError, match="must be > 0"):
        num_blocks_for_pressure(wl, 0, 16)


def test_agents_steps_grow_by_call_and_result_and_share_the_manifest():
    wl = make("agents", seed=4, agent_types=2, system_tokens=32, manifest_tokens=48, sessions=5, steps=3,
              task_tokens=8, result_tokens=16, output_tokens=4)
    by_session: dict[str, list] = {}
    for r in wl.requests:
        by_session.setdefault(r.session_id, []).append(r)
    assert len(by_session) == 5
    for rs in by_session.values():
        assert [int(r.request_id.split("-t")[1]) for r in rs] == list(range(len(rs)))  # steps in order
        assert 2 <= len(rs) <= 5
        for a, b in zip(rs, rs[1:]):
            assert b.prompt_token_ids[: a.num_prompt_tokens + 4] == a.prompt_token_ids + a.output_token_ids
            assert b.num_prompt_tokens == a.num_prompt_tokens + 4 + 16
    first = [rs[0] for rs in by_session.values()]
    assert len({r.prompt_token_ids[:32] for r in first}) == 1  # one system prompt
    by_type: dict[str, set] = {}
    for r in first:
        by_type.setdefault(r.prefix_group, set()).add(r.prompt_token_ids[:80])
    assert all(len(v) == 1 for v in by_type.values())  # system + the type's manifest
    assert len({r.prompt_token_ids[:80] for r in first}) == len(by_type)


def test_rag_documents_ranked_and_followups_reuse_them():
    kw = dict(docs=6, doc_tokens=16, system_tokens=8, k=3, requests=20, query_tokens=4, followups=2,
              followup_p=1.0)
    wl = make("rag", seed=2, **kw)
    assert len(wl.requests) == 60  # every follow-up taken at p = 1
    by_q: dict[str, list] = {}
    for r in wl.requests:
        by_q.setdefault(r.request_id.split("-f")[0], []).append(r)
    for rs in by_q.values():
        assert [r.request_id.split("-f")[1] for r in rs] == ["0", "1", "2"]  # follow-ups come later
        assert len({r.prompt_token_ids[:8 + 48] for r in rs}) == 1  # same documents
        assert len({r.prompt_token_ids[8 + 48:] for r in rs}) == 3  # new questions
    ranked = make("rag", seed=2, **kw).requests
    drawn = make("rag", seed=2, doc_order="retrieved", **kw).requests
    assert [r.prompt_token_ids[8:] for r in ranked] != [r.prompt_token_ids[8:] for r in drawn]
    # same draws, other order: the same multiset of documents per request
    assert [sorted(r.prompt_token_ids[8:56]) for r in ranked] == [sorted(r.prompt_token_ids[8:56]) for r in drawn]
    assert len(make("rag", seed=2, **{**kw, "followup_p": 0.0}).requests) == 20
    with pytest.raises(ValueError, match="flag 'k'"):
        make("rag", seed=0, docs=2, k=3)


def test_scan_one_offs_between_hot_requests():
    wl = make("scan", seed=1, hot=3, prefix_tokens=32, requests=8, query_tokens=4, scan_every=4, scan_length=2,
              scan_tokens=16)
    ids = [r.request_id for r in wl.requests]
    assert ids == ["h0", "h1", "h2", "h3", "scan-0", "scan-1", "h4", "h5", "h6", "h7", "scan-2", "scan-3"]
    hot = [r for r in wl.requests if r.request_id.startswith("h")]
    assert {r.prompt_token_ids[:32] for r in hot} <= {r.prompt_token_ids[:32] for r in hot[:8]}
    assert len({r.prompt_token_ids[:32] for r in hot}) <= 3
    scans = [r.prompt_token_ids for r in wl.requests if r.request_id.startswith("scan")]
    assert len(set(scans)) == 4 and all(r.session_id.startswith("scan") for r in wl.requests[4:6])
    with pytest.raises(ValueError, match="flag 'hot'"):
        make("scan", seed=0, hot=0)


def test_mix_interleaves_streams_keeping_their_order():
    wl = make("mix", seed=3, chat_sessions=3, agent_sessions=2, rag_requests=5, oneoff_requests=4)
    kinds = {r.request_id.split("-")[0] for r in wl.requests}
    assert kinds == {"chat", "agent", "rag", "once"}
    assert sum(r.request_id.startswith("once") for r in wl.requests) == 4
    assert sum(r.request_id.startswith("chat") for r in wl.requests) == 3 * 4
    chat = [r for r in wl.requests if r.request_id.startswith("chat")]
    for s in {r.session_id for r in chat}:
        turns = [int(r.request_id.split("-t")[1]) for r in chat if r.session_id == s]
        assert turns == sorted(turns)
    other = make("mix", seed=4, chat_sessions=3, agent_sessions=2, rag_requests=5, oneoff_requests=4)
    assert [r.request_id for r in other.requests] != [r.request_id for r in wl.requests]
