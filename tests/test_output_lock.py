"""One output, one writer: a live run's results file is refused to a second
run; a killed run leaves the old file (or none) and no lock that blocks
(issue 13, item 4). Real processes, real SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from spfcore.cli import main
from spfcore.fileio import OutputInUseError, lock_path, output_lock, write_atomic
from spfcore.run.store import sidecar_path

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
SMALL = ["--workload", "multiturn", "--set", "sessions=2", "--set", "turns=2", "--set", "prefix_tokens=64",
         "--set", "query_tokens=8", "--set", "output_tokens=2", "--arms", "lru", "--no-ceilings"]


def _holder(out, *, then="sleep"):
    """A separate Python process holding output_lock(out): prints 'held' then sleeps (or kills itself
    mid-write of ``out`` after 2000 lines)."""
    code = f"""
import os, signal, sys, time
from spfcore.fileio import output_lock, write_atomic
with output_lock({str(out)!r}):
    print("held", flush=True)
    if {then!r} == "sleep":
        time.sleep(120)
    def lines():
        for i in range(10**6):
            if i == 2000:
                os.kill(os.getpid(), signal.SIGKILL)
            yield '{{"line": %d}}' % i
    write_atomic({str(out)!r}, lines())
"""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=ENV)
    assert p.stdout.readline().strip() == "held"
    return p


def test_second_writer_in_this_process_is_refused_and_nothing_is_left(tmp_path):
    out = tmp_path / "new" / "r.json"
    with output_lock(out) as lf:
        assert lf == lock_path(out) == tmp_path / "new" / "r.json.lock"
        assert f"pid {os.getpid()} " in lf.read_text()
        with pytest.raises(OutputInUseError, match=rf"{out}: another run is writing this output \(pid {os.getpid()} "):
            with output_lock(out):
                pass
    assert not (tmp_path / "new").exists()  # the folder made for the lock is gone again
    with output_lock(out):  # free again
        pass


def test_live_process_holds_simulate_and_gate_off_and_its_kill_frees_the_output(tmp_path):
    out = tmp_path / "results.json"
    out.write_text('{"old": true}\n')
    p = _holder(out)
    try:
        r = CliRunner().invoke(main, ["simulate", *SMALL, "--num-blocks", "12", "-o", str(out)])
        assert r.exit_code == 1, r.output
        msg = " ".join(r.output.split())
        assert f"{out}: another run is writing this output (pid {p.pid} " in msg and f"lock {out}.lock" in msg
        r = CliRunner().invoke(main, ["gate", "--preset", "quick", "--output", str(out), "--no-progress"])
        assert r.exit_code == 1 and f"(pid {p.pid} " in " ".join(r.output.split())
        # a bad argument is named first, not the lock
        for bad, words in ((["--policy-opt", "frequency.nope=1"], "unknown parameter 'nope'"),
                           (["--policy-opt", "lru"], "expected NAME.KEY=VALUE"),
                           (["--merge-from", str(tmp_path)], "not a gate run")):
            r = CliRunner().invoke(main, ["gate", "--preset", "quick", "--output", str(out), "--no-progress", *bad])
            assert r.exit_code == 2, r.output
            assert words in r.output and "another run" not in r.output and bad[0] in r.output
        assert not sidecar_path(out).exists()  # refused before the gate wrote its sidecar
        assert out.read_text() == '{"old": true}\n'
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert lock_path(out).exists()  # the killed holder's lock file stays behind, but does not block
    r = CliRunner().invoke(main, ["simulate", *SMALL, "--num-blocks", "12", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["cells"][0]["arm"] == "lru"
    assert not lock_path(out).exists()


@pytest.mark.parametrize("old", ['{"old": true}\n', None])
def test_killed_mid_write_leaves_the_old_file_or_none_and_no_temp_after_the_next_run(tmp_path, old):
    out = tmp_path / "r.json"
    if old is not None:
        out.write_text(old)
    p = _holder(out, then="write")
    assert p.wait() == -signal.SIGKILL
    assert (out.read_text() if out.exists() else None) == old  # never half a file
    temps = list(tmp_path.glob(".r.json.*.tmp"))
    assert len(temps) == 1 and temps[0].read_text().startswith('{"line": 0}')  # the killed writer's temp
    with output_lock(out):  # not blocked; the dead writer's temp is cleared
        assert not list(tmp_path.glob(".r.json.*.tmp"))
        write_atomic(out, "new\n")
    assert out.read_text() == "new\n"


def test_simulate_killed_mid_run_keeps_the_old_file_and_the_rerun_works(tmp_path):
    out = tmp_path / "r.json"
    out.write_text('{"old": true}\n')
    args = [sys.executable, "-m", "spfcore.cli", "simulate", "--workload", "multiturn", "--set", "sessions=40",
            "--set", "turns=6", "--set", "prefix_tokens=1024", "--arms", "lru,frequency,session_ttl",
            "--seeds", "1,2,3", "--num-blocks", "200", "-o", str(out)]
    p = subprocess.Popen(args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not lock_path(out).exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert json.loads(out.read_text()) in ({"old": True},) or "cells" in json.loads(out.read_text())
    r = CliRunner().invoke(main, ["simulate", *SMALL, "--num-blocks", "12", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["kind"] == "spfcore-simulate"


def test_a_symlink_to_a_held_output_shares_its_lock(tmp_path):
    """Two names of one results file are one output: the lock follows the link,
    and an atomic write through the link replaces the target, keeping the link."""
    from spfcore.fileio import OutputInUseError, lock_path, output_lock, write_atomic

    target = tmp_path / "results.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert lock_path(link) == lock_path(target)
    with output_lock(target):
        with pytest.raises(OutputInUseError):
            with output_lock(link):
                pass
    write_atomic(link, '{"new": 1}')
    assert link.is_symlink() and target.read_text() == '{"new": 1}'


def test_atomic_writes_get_the_usual_permissions(tmp_path):
    """write_atomic and savefig_atomic give 0666 minus the umask (not mkstemp's 0600), and leave no temp file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from spfcore.fileio import write_atomic
    from spfcore.report.plots import savefig_atomic

    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "a.json", "{}")
        fig = plt.figure()
        savefig_atomic(fig, tmp_path / "b.png")
        plt.close(fig)
    finally:
        os.umask(old)
    assert oct(os.stat(tmp_path / "a.json").st_mode & 0o777) == oct(0o644)
    assert oct(os.stat(tmp_path / "b.png").st_mode & 0o777) == oct(0o644)
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.png"]


def test_write_atomic_writes_a_fifo_in_place_and_refuses_a_folder(tmp_path):
    """An output that exists and is not a regular file is written in place, not replaced (session 10:
    ``make-trace ... /dev/null`` as root swapped the device node for a plain file); a folder is refused."""
    import os
    import stat
    import threading

    from spfcore.fileio import write_atomic

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    write_atomic(fifo, ["a", "b"])
    reader.join(timeout=10)
    assert got == ["a\nb\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still a pipe
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]  # no temporary file left beside it
    with pytest.raises(IsADirectoryError):
        write_atomic(tmp_path, "x")
