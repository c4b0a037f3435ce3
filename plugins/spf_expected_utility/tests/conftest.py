"""These tests check the plugin's own hooks, so the simulator runs them: its
compiled sequential replay of this policy (``spfcore/sim/_replay_spf_nb.py``)
would stand in for them and call no hook. ``tests/test_sim_compiled.py``
compares that replay with these hooks decision for decision."""

import pytest

from spfcore.sim.simulator import REPLAY_ENV


@pytest.fixture(autouse=True)
def _hooks_replay(monkeypatch):
    monkeypatch.setenv(REPLAY_ENV, "python")
