"""Prepared streams (:mod:`spfcore.sim.prepared`): the replay of a prepared
stream is the replay of its trace, record for record and decision for
decision; a partial or corrupt folder is found (the file named) and written
again; writing is atomic and happens once when several ask at the same time."""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest

from spfcore.sim.cell import open_input
from spfcore.sim.prepared import PreparedStreamError, ensure_prepared, open_prepared, write_prepared
from spfcore.sim.simulator import iter_plans, iter_views, scan, simulate_stream
from spfcore.workloads import generators
from spfcore.workloads.options import WorkloadSpec
from spfcore.workloads.synth import TraceShape, write_synthetic
from spfcore.workloads.traces import TraceError, TraceStream, write_jsonl


@pytest.fixture(scope="module")
def mooncake(tmp_path_factory):
    """A Mooncake-format trace (hash ids, block size 512, no sessions)."""
    p = tmp_path_factory.mktemp("mc") / "mc.jsonl"
    write_synthetic(p, 300, 3, TraceShape(sessions=16, system_prompts=4))
    return p


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    """An spfcore JSONL trace with token ids, sessions, prefix groups and
    output token ids (decode blocks that later turns hit)."""
    p = tmp_path_factory.mktemp("tok") / "tok.jsonl"
    write_jsonl(generators.make("multiturn", seed=3, personas=3, prefix_tokens=64, sessions=6, turns=3), p)
    return p


def _plain(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if not k.endswith("_seconds")}


def _run(src, arm: str, nb: int, bs: int):
    try:
        return _plain(simulate_stream(src, arm, num_blocks=nb, block_size=bs, per_request=True))
    except ValueError as exc:  # a request that does not fit: the same message
        return str(exc)


@pytest.mark.parametrize("replay", ["auto", "python"])
def test_a_prepared_stream_replays_as_its_trace(mooncake, tokens, tmp_path, monkeypatch, replay):
    monkeypatch.setenv("SPFCORE_SIM_REPLAY", replay)  # python: lru and Belady through their hooks too
    arms = ("lru", "belady_oracle", "session_ttl", "frequency", "sieve") if replay == "auto" else (
        "lru", "belady_oracle")
    for trace, bs, sizes in ((mooncake, 512, (30, 80, 400)), (tokens, 16, (20, 40, 200))):
        s = TraceStream(trace)
        ps = open_prepared(write_prepared(s, bs, tmp_path / trace.stem), verify=True)
        # the same keys, views and plans as the trace's (block hashes are Python ints rebuilt from 128 bits)
        assert list(ps.views()) == list(iter_views(s, bs))
        assert list(ps.plans()) == list(iter_plans(s, bs))
        assert ps.scan == scan(s, bs) and ps.num_requests == ps.scan.num_requests > 0
        assert ps.unique_blocks == open_input(WorkloadSpec(trace=str(trace)), 0, bs).unique_blocks()
        kinds = set()
        for nb in sizes:  # the smallest size is too small for some request: the same error, named alike
            for arm in arms:
                want = _run(s, arm, nb, bs)
                assert _run(ps, arm, nb, bs) == want, (trace.name, arm, nb)
                kinds.add(type(want))
        assert kinds == {dict, str}
    with pytest.raises(ValueError, match="prepared at block size 16, asked for 32"):
        simulate_stream(ps, "lru", num_blocks=100, block_size=32)


def test_the_compiled_replays_read_the_maps(mooncake, tmp_path):
    """The compiled arms take the key ids straight from the read-only maps (nothing copied per cell)."""
    ps = open_prepared(write_prepared(TraceStream(mooncake), 512, tmp_path / "ps"))
    bk = ps.flat()[0]
    assert isinstance(bk, np.memmap) and not bk.flags.writeable
    uses, _ = ps.future()
    assert isinstance(uses, np.memmap) and len(uses) <= len(bk)
    rec = simulate_stream(ps, "belady_oracle", num_blocks=80, block_size=512)
    assert rec["block_refs"] == len(bk) and 0 < rec["hit_blocks"] < rec["block_refs"]


def test_a_partial_or_corrupt_folder_is_found_and_written_again(mooncake, tmp_path):
    path = write_prepared(TraceStream(mooncake), 512, tmp_path / "ps")
    good = {p.name: p.read_bytes() for p in path.iterdir()}
    with pytest.raises(FileExistsError):  # never overwritten
        write_prepared(TraceStream(mooncake), 512, path)
    # a cut file: its size differs from meta.json's (every opening checks)
    (path / "bk.npy").write_bytes(good["bk.npy"][:-8])
    with pytest.raises(PreparedStreamError, match=rf"{path / 'bk.npy'}: field 'bytes'"):
        open_prepared(path)
    (path / "bk.npy").write_bytes(good["bk.npy"])
    # a flipped byte, same size: found by the SHA-256 check
    flipped = bytearray(good["key_lo.npy"])
    flipped[-1] ^= 0xFF
    (path / "key_lo.npy").write_bytes(bytes(flipped))
    open_prepared(path)  # sizes, dtypes and shapes agree
    with pytest.raises(PreparedStreamError, match=rf"{path / 'key_lo.npy'}: field 'sha256'"):
        open_prepared(path, verify=True)
    # ensure_prepared writes it again (once), and the new folder is the old one's bytes
    calls = []

    def source():
        calls.append(1)
        return TraceStream(mooncake)

    ps = ensure_prepared(path, source, 512)
    assert calls == [1] and {p.name: p.read_bytes() for p in ps.path.iterdir()} == good
    assert ensure_prepared(path, source, 512).path == path and calls == [1]  # a whole folder is reused
    assert ensure_prepared(path, source, 512, info={"other": 1}) and calls == [1, 1]  # another source: rewritten
    # a missing file, a missing meta.json (a writer killed before its end), another version
    (path / "uses.npy").unlink()
    with pytest.raises(PreparedStreamError, match=rf"{path / 'uses.npy'}: missing"):
        open_prepared(path)
    (path / "meta.json").unlink()
    with pytest.raises(PreparedStreamError, match=rf"{path / 'meta.json'}: missing"):
        open_prepared(path)
    # a file where the folder should be is replaced, and nothing is left beside it (rmtree left the file)
    shutil.rmtree(path)
    path.write_text("x")
    ps = ensure_prepared(path, source, 512)
    assert ps.path.is_dir() and sorted(p.name for p in tmp_path.iterdir()) == ["ps", "ps.lock"]


def test_writing_is_atomic_and_once(mooncake, tmp_path):
    def broken():  # a trace whose 200th line is malformed: nothing may be left behind
        for i, r in enumerate(TraceStream(mooncake)):
            if i == 200:
                raise TraceError("t.jsonl:201: field 'hash_ids': missing")
            yield r

    with pytest.raises(TraceError, match="201"):
        write_prepared(broken(), 512, tmp_path / "ps")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / ".ps.123.tmp").mkdir()  # a killed writer's temporary folder
    calls = []

    def source():
        calls.append(1)
        return TraceStream(mooncake)

    got = []
    threads = [threading.Thread(target=lambda: got.append(ensure_prepared(tmp_path / "ps", source, 512)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 3 and calls == [1]  # one wrote, the others waited and mapped its folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ps", "ps.lock"]
    open_prepared(tmp_path / "ps", verify=True)
