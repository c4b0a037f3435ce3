"""The conformance kit catches broken policies, each with a message that says
what is wrong, through `pytest --spfcore-policy NAME` (pytester, a separate
pytest process with the plugin loaded by `-p`, as before spfcore's pytest11
entry point is installed)."""

import os
import textwrap
import xml.etree.ElementTree as ET

import pytest

from spfcore import CONTRACT_VERSION, conformance

BROKEN = textwrap.dedent('''
    """Deliberately broken policies: one fault each."""
    import attrs
    import numpy as np
    from spfcore import hookimpl


    @attrs.frozen
    class P:
        """Parameters.

        Attributes:
            weight: Documented (unitless).
        """
        weight: float = 1.0
        secret: int = 3


    @attrs.frozen
    class NoParams:
        """No parameters."""


    class Base:
        """A valid policy in every other respect."""
        contract = "1.0"
        capabilities = frozenset({"scoring"})
        Params = NoParams

        def __init__(self, params):
            self.params = params


    class Undocumented(Base):
        """Leaves a parameter undocumented and declares no contract."""
        name = "kit_undocumented"
        contract = None
        capabilities = frozenset()
        Params = P


    class BadShape(Base):
        """Drops the last score of batches of three blocks or more."""
        name = "kit_bad_shape"

        @hookimpl
        def spfcore_score_blocks(self, blocks, now):
            v = -blocks.depth.astype(float)
            return v[:-1] if len(v) >= 3 else v


    class HashOrder(Base):
        """Ranks a batch in the iteration order of a set of its keys."""
        name = "kit_hash_order"

        @hookimpl
        def spfcore_score_blocks(self, blocks, now):
            order = {k: j for j, k in enumerate(set(blocks.keys))}
            return np.array([order[k] for k in blocks.keys], dtype=float)


    class Hoarder(Base):
        """Remembers every block hash it ever stored."""
        name = "kit_hoarder"
        capabilities = frozenset()

        def __init__(self, params):
            self.params, self.seen = params, {}

        @hookimpl
        def spfcore_blocks_stored(self, request, blocks, now):
            for k in blocks.keys:
                self.seen[k] = now


    class SecretAdmission(Base):
        """Implements admission without declaring it."""
        name = "kit_secret_admission"

        @hookimpl
        def spfcore_admit_blocks(self, blocks, now):
            return blocks.depth < 100
''')

NAMES = {"kit_undocumented": "Undocumented", "kit_bad_shape": "BadShape", "kit_hash_order": "HashOrder",
         "kit_hoarder": "Hoarder", "kit_secret_admission": "SecretAdmission"}

# (test, policy) -> a fragment of the failure message; every other listed pair must pass
EXPECTED_FAILURES = {
    ("test_params", "kit_undocumented"): "field(s) secret have no meaning: add them to an 'Attributes:' section",
    ("test_attributes", "kit_undocumented"): "declares no contract version: add the class attribute contract = "
                                             f"\"{'.'.join(CONTRACT_VERSION.split('.')[:2])}\"",
    ("test_answers", "kit_bad_shape"): "hook spfcore_score_blocks returned",
    ("test_deterministic", "kit_hash_order"): "decisions differ with PYTHONHASHSEED=",
    ("test_bounded_state", "kit_hoarder"): "state grew with the stream",
    ("test_attributes", "kit_secret_admission"): "implements spfcore_admit_blocks but does not declare capability "
                                                 "'admission'",
    ("test_loads", "kit_missing"): "does not load: error: ModuleNotFoundError: No module named 'kit_nowhere'",
}
EXPECTED_PASSES = [
    ("test_loads", "kit_bad_shape"), ("test_answers", "kit_hash_order"), ("test_answers", "kit_hoarder"),
    ("test_deterministic", "kit_hoarder"), ("test_bounded_state", "kit_hash_order"),
    ("test_params", "kit_hoarder"), ("test_attributes", "kit_hoarder"), ("test_sim_matches_minicache", "kit_hoarder"),
]


@pytest.fixture
def broken_dist(pytester, monkeypatch):
    """The broken policies as an installed distribution (a dist-info on PYTHONPATH)."""
    site = pytester.mkdir("site")
    (site / "kitbroken.py").write_text(BROKEN)
    info = site / "kitbroken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kitbroken\nVersion: 0.1\n")
    eps = "".join(f"{n} = kitbroken:{c}\n" for n, c in NAMES.items())
    (info / "entry_points.txt").write_text("[spfcore.policies]\n" + eps + "kit_missing = kit_nowhere:Policy\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    return site


def _outcomes(xml_path) -> dict:
    """{(test, policy): (outcome, message)} from a junit XML report."""
    out = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        test, _, policy = case.get("name").partition("[")
        fail = case.find("failure")
        if fail is None:
            fail = case.find("error")
        out[(test, policy.rstrip("]"))] = ("passed", "") if fail is None else \
            ("failed", (fail.get("message") or "") + (fail.text or ""))
    return out


def test_broken_policies_fail_with_clear_messages(pytester, broken_dist):
    names = [*NAMES, "kit_missing"]
    args = [a for n in names for a in ("--spfcore-policy", n)]
    res = pytester.runpytest_subprocess("-p", "spfcore.conformance", *args, "--spfcore-examples", "10",
                                        "-k", "not pins and not hook_costs", "-p", "no:cacheprovider",
                                        f"--junitxml={pytester.path / 'kit.xml'}")
    got = _outcomes(pytester.path / "kit.xml")
    assert {t for t, _ in got} == {"test_loads", "test_params", "test_attributes", "test_answers",
                                   "test_deterministic", "test_bounded_state", "test_sim_matches_minicache"}
    assert {p for _, p in got} == set(names)  # the suite alone ran: no test of this checkout was collected
    for key, fragment in EXPECTED_FAILURES.items():
        outcome, message = got[key]
        assert outcome == "failed" and fragment in message, (key, message[:2000])
    for key in EXPECTED_PASSES:
        assert got[key][0] == "passed", (key, got[key][1][:2000])
    assert res.ret == pytest.ExitCode.TESTS_FAILED


def test_the_shape_failure_names_the_request_and_the_hook():
    # a one-off request of 4 full blocks: its release batch has 4 cached blocks, the broken answer 3
    import numpy as np

    from spfcore import hookimpl
    from spfcore.runtime import PolicyRuntime
    from spfcore.registry import new_plugin_manager

    class Short:
        params = None

        @hookimpl
        def spfcore_score_blocks(self, blocks, now):
            return np.zeros(max(len(blocks) - 1, 0))

    pm = new_plugin_manager()
    pm.register(Short(), name="short")
    rt = PolicyRuntime(pm, 10, 4, policy_name="short")
    c = conformance.mini_cache("short", 10, [], runtime=rt)
    stream = conformance.build_stream([(0, 1, 3)])
    with pytest.raises(conformance.ConformanceError) as exc:
        conformance.serve_stream(c, stream, "short")
    assert str(exc.value) == ("policy 'short', request 0 of 1 (session None, 4 blocks ['sys1', 'sys1/x1', "
                              "'sys1/x1/x2', 'sys1/x1/x2/x3']): policy 'short': hook spfcore_score_blocks returned "
                              "an array of shape (3,) for 4 blocks")


def test_streams_are_deterministic_and_shaped():
    a = conformance.random_stream(3, 200)
    assert a == conformance.random_stream(3, 200) and a != conformance.random_stream(4, 200)
    assert all(1 <= len(keys) <= 6 for _, keys in a)
    # equal keys mean equal prefixes: every key's parent is the key before it
    assert all(k.rsplit("/", 1)[0] == keys[j - 1] for _, keys in a for j, k in enumerate(keys) if j)
    sessions = {s for s, _ in a if s}
    assert 4 <= len(sessions) <= 8 and any(s is None for s, _ in a)
    fresh = {s for s, _ in conformance.random_stream(3, 600, fresh_sessions=True) if s}
    assert len(fresh) > 40  # session ids keep changing
