"""scripts/gpu_sweep_bundle.sh gets past its set-up in a git worktree (where
``.git`` is a file), without downloading anything: ``python3`` is a stub that
fails, so the script stops at its first download."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_sweep_bundle.sh"


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_bundle_script_sets_up_in_a_worktree(tmp_path):
    main, wt, stub = tmp_path / "main", tmp_path / "wt", tmp_path / "bin"
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    git = ["git", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(main)], check=True, env=env)
    (main / "scripts").mkdir()
    shutil.copy(SCRIPT, main / "scripts" / SCRIPT.name)
    subprocess.run([*git, "-C", str(main), "add", "."], check=True, env=env)
    subprocess.run([*git, "-C", str(main), "commit", "-qm", "s"], check=True, env=env)
    subprocess.run([*git, "-C", str(main), "worktree", "add", "-q", str(wt)], check=True, env=env)
    assert (wt / ".git").is_file()
    stub.mkdir()
    (stub / "python3").write_text("#!/bin/sh\necho stub python3 \"$@\" >&2\nexit 7\n")
    (stub / "python3").chmod(0o755)
    env["PATH"] = f"{stub}:{env['PATH']}"
    r = subprocess.run(["bash", str(wt / "scripts" / SCRIPT.name)], capture_output=True, text=True, env=env)
    assert "Not a directory" not in r.stderr, r.stderr
    assert r.returncode == 7 and "stub python3 -m pip download" in r.stderr, r.stderr  # stopped at the download
    exclude = Path(subprocess.run(["git", "-C", str(wt), "rev-parse", "--path-format=absolute", "--git-path",
                                   "info/exclude"], capture_output=True, text=True, check=True).stdout.strip())
    assert "/.gpu/" in exclude.read_text().splitlines()
