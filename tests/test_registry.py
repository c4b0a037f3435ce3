"""Registry: installed policies pass hookspec validation; allow/block lists;
broken plugins are listed with their error and never break listing or a run."""

import json
import textwrap

import pytest
from click.testing import CliRunner

from spfcore import registry
from spfcore.cli import main
from spfcore.registry import CAPABILITIES, PolicyConfigError
from spfcore.runtime import PolicyRuntime

SHIPPED = {"lru", "belady_oracle", "frequency", "session_ttl", "spf_expected_utility"}
DISTS = {"lru": "spfcore", "belady_oracle": "spfcore-belady-oracle", "frequency": "spfcore-frequency",
         "session_ttl": "spfcore-session-ttl", "spf_expected_utility": "spfcore-spf-expected-utility"}


def test_every_shipped_policy_is_valid():
    # shipped ones only: a broken third-party plugin in the same environment is
    # listed as an error (tested below), not a failure of this project
    infos = {p.name: p for p in registry.discover({})}
    assert SHIPPED <= set(infos)
    for name in sorted(SHIPPED):
        info = infos[name]
        assert info.status == "ok", (name, info.status)
        assert info.cls.name == name and set(info.capabilities) <= CAPABILITIES
        pm, instance = registry.plugin_manager(info)
        pm.check_pending()  # every hookimpl matches a hookspec
        assert all(h.startswith("spfcore_") for h in info.hooks)
        assert all(p["name"] for p in info.parameters) and info.summary
    for name, dist in DISTS.items():
        assert infos[name].distribution == dist


def test_capabilities_and_hooks_of_shipped_policies():
    infos = {p.name: p for p in registry.discover({})}
    assert infos["lru"].hooks == ()
    assert infos["belady_oracle"].capabilities == ("chain-only", "needs-future", "scoring")
    assert "spfcore_future_requests" in infos["belady_oracle"].hooks
    assert "spfcore_admit_blocks" in infos["frequency"].hooks
    assert "spfcore_rescore_keys" in infos["session_ttl"].hooks
    # the default variant ("utility") learns from evictions; hints belong to variant="seed"
    assert "spfcore_blocks_evicted" in infos["spf_expected_utility"].hooks
    assert "spfcore_prefetch_hints" not in infos["spf_expected_utility"].hooks


def test_allowlist_and_blocklist():
    names = lambda env: {p.name for p in registry.discover(env)}  # noqa: E731
    assert names({"SPFCORE_POLICIES": "lru, frequency"}) == {"lru", "frequency"}
    assert names({"SPFCORE_DISABLE_POLICIES": "frequency"}) >= SHIPPED - {"frequency"}
    assert "frequency" not in names({"SPFCORE_DISABLE_POLICIES": "frequency"})
    assert names({"SPFCORE_POLICIES": "lru,frequency", "SPFCORE_DISABLE_POLICIES": "lru"}) == {"frequency"}
    assert names({"SPFCORE_POLICIES": " "}) >= SHIPPED  # empty = no allowlist
    with pytest.raises(PolicyConfigError, match=r"policy 'frequency' is not installed or not allowed \(available: lru\)"):
        registry.get("frequency", {"SPFCORE_POLICIES": "lru"})


def test_parse_options_and_make_params():
    opts = registry.parse_options(["session_ttl.ttl_arrivals=3", "session_ttl.ttl_seconds=none",
                                   "frequency.min_count = 4"])
    assert opts == {"session_ttl": {"ttl_arrivals": "3", "ttl_seconds": "none"},
                    "frequency": {"min_count": "4"}}
    p = registry.make_params(registry.get("session_ttl"), opts["session_ttl"])
    assert (p.ttl_arrivals, p.ttl_seconds, p.pin_cap_fraction) == (3, None, 0.5)
    p = registry.make_params(registry.get("spf_expected_utility"), {"hints": "no", "h": "2.5"})
    assert (p.hints, p.h) == (False, 2.5)
    with pytest.raises(PolicyConfigError, match=r"^bad --policy-opt 'frequency=3': expected NAME.KEY=VALUE$"):
        registry.parse_options(["frequency=3"])
    with pytest.raises(PolicyConfigError, match=r"^policy 'frequency': unknown parameter 'count' "
                                                r"\(allowed: min_count, ghost_factor, tier_order\)$"):
        registry.make_params(registry.get("frequency"), {"count": "2"})
    with pytest.raises(PolicyConfigError, match=r"^policy 'spf_expected_utility': bad value 'maybe' for 'hints'"):
        registry.make_params(registry.get("spf_expected_utility"), {"hints": "maybe"})
    # attrs' in_ validator raises ValueError(message, attribute, options, value): the message, not the tuple
    with pytest.raises(PolicyConfigError) as e:
        registry.make_params(registry.get("frequency"), {"tier_order": "x"})
    assert str(e.value) == "policy 'frequency': 'tier_order' must be in ('count', 'lru') (got 'x')"


def test_runtime_takes_pin_cap_from_params():
    rt = PolicyRuntime.for_policy("session_ttl", 10, 4, {"pin_cap_fraction": "0.3"})
    assert rt.evictor.pin_cap == 3 and rt.policy_name == "session_ttl"
    assert PolicyRuntime.for_policy("belady_oracle", 10, 4).needs_future


@pytest.fixture
def broken_dist(tmp_path, monkeypatch):
    """A throw-away distribution on sys.path with three broken policies."""
    (tmp_path / "brokenpol_hooks.py").write_text(textwrap.dedent('''
        import attrs
        from spfcore import hookimpl

        @attrs.frozen
        class P:
            """No parameters."""

        class BadHook:
            """Implements a hook that is not in the spec."""
            name = "bad_hook"
            capabilities = frozenset()
            Params = P
            def __init__(self, params):
                self.params = params
            @hookimpl
            def spfcore_not_a_hook(self, now):
                return None

        class Misnamed(BadHook):
            """Its name differs from its entry point."""
            name = "something_else"
            spfcore_not_a_hook = None
    '''))
    info = tmp_path / "brokenpol-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenpol\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[spfcore.policies]\n"
        "broken_import = brokenpol_missing_module:Policy\n"
        "bad_hook = brokenpol_hooks:BadHook\n"
        "misnamed = brokenpol_hooks:Misnamed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_broken_plugins_are_listed_with_their_error(broken_dist):
    infos = {p.name: p for p in registry.discover({})}
    assert infos["broken_import"].status == "error: ModuleNotFoundError: No module named 'brokenpol_missing_module'"
    assert infos["bad_hook"].status.startswith("error: PluginValidationError: ")
    assert "spfcore_not_a_hook" in infos["bad_hook"].status
    assert infos["misnamed"].status == ("error: TypeError: class name 'something_else' differs "
                                        "from entry-point name 'misnamed'")
    assert {infos[n].distribution for n in ("broken_import", "bad_hook")} == {"brokenpol"}
    assert all(infos[n].status == "ok" for n in SHIPPED)
    with pytest.raises(PolicyConfigError, match="policy 'bad_hook' cannot be used: error: PluginValidationError"):
        PolicyRuntime.for_policy("bad_hook", 8, 4)
    # healthy policies still build and run
    rt = PolicyRuntime.for_policy("frequency", 8, 4)
    rt.release([], list(range(8)), 0.0)
    assert rt.evict(3, 0.0) == [0, 1, 2]


def test_cli_lists_broken_plugins_and_exits_zero(broken_dist):
    runner = CliRunner()
    res = runner.invoke(main, ["list-policies"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "bad_hook" in res.output and "error: PluginValidationError" in res.output
    res = runner.invoke(main, ["list-policies", "--json"])
    assert res.exit_code == 0
    rows = {r["name"]: r for r in json.loads(res.output)}
    assert rows["broken_import"]["status"].startswith("error: ModuleNotFoundError")
    assert rows["frequency"]["status"] == "ok" and rows["frequency"]["distribution"] == "spfcore-frequency"
    res = runner.invoke(main, ["describe", "bad_hook"])
    assert res.exit_code == 1 and "cannot be used" in res.output


def test_describe_lists_the_choices_of_a_literal_parameter():
    from click.testing import CliRunner

    from spfcore.cli import main

    info = registry.get("spf_expected_utility")
    params = {p["name"]: p for p in info.parameters}
    assert params["variant"]["type"] == "one of 'utility' | 'seed'" and params["variant"]["default"] == "utility"
    res = CliRunner().invoke(main, ["describe", "spf_expected_utility"])
    assert res.exit_code == 0 and "variant: one of 'utility' | 'seed' = 'utility'" in res.output


def test_describe_gives_each_parameter_its_meaning_from_the_params_docstring():
    from click.testing import CliRunner

    from spfcore.cli import main

    params = {p["name"]: p for p in registry.get("session_ttl").parameters}
    assert params["ttl_arrivals"]["doc"].startswith("TTL in arrivals (int >= 1): a session whose latest")
    assert params["pin_cap_fraction"]["doc"].startswith("Most pinned free blocks, as a share of the pool")
    res = CliRunner().invoke(main, ["describe", "session_ttl"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    lines = res.output.splitlines()
    i = lines.index("  ttl_arrivals: int = 8")
    assert lines[i + 1].startswith("      TTL in arrivals (int >= 1)")
    assert "``" not in res.output and ":mod:" not in res.output  # docstring markup shown plain
    assert "session is active while now < t + ttl_seconds where t is" in " ".join(res.output.split())


@pytest.mark.parametrize("name", ["lru", "session_ttl", "frequency", "spf_expected_utility", "belady_oracle"])
def test_every_parameter_of_a_shipped_policy_has_a_meaning(name):
    undocumented = [p["name"] for p in registry.get(name).parameters if not p["doc"]]
    assert undocumented == []


def test_a_plugin_cannot_take_over_a_name(tmp_path, monkeypatch):
    """A third-party entry point named like the built-in ``lru`` is listed as
    an error and ignored; two third-party claims of one name are both refused."""
    (tmp_path / "shadowpol.py").write_text(textwrap.dedent('''
        import attrs
        from spfcore import Score, hookimpl

        @attrs.frozen
        class P:
            """No parameters."""

        class DeepFirst:
            """Scores blocks by depth."""
            name = "lru"
            capabilities = frozenset({"scoring"})
            Params = P
            def __init__(self, params):
                self.params = params
            @hookimpl
            def spfcore_score_blocks(self, blocks, now):
                return [Score(float(b.depth)) for b in blocks]

        class Twin(DeepFirst):
            """Claims a name another third party claims too."""
            name = "twin"
    '''))
    for dist in ("shadowpol", "otherpol"):
        info = tmp_path / f"{dist}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        eps = "[spfcore.policies]\ntwin = shadowpol:Twin\n" + ("lru = shadowpol:DeepFirst\n" if dist == "shadowpol" else "")
        (info / "entry_points.txt").write_text(eps)
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = [(p.name, p.distribution, p.status) for p in registry.discover({}) if p.name in ("lru", "twin")]
    assert rows[0] == ("lru", "spfcore", "ok")
    assert rows[1] == ("lru", "shadowpol", "error: name 'lru' belongs to the built-in policy (spfcore); "
                                           "this entry point is ignored")
    assert [r[:2] for r in rows[2:]] == [("twin", "otherpol"), ("twin", "shadowpol")]
    assert all("claimed by several distributions (otherpol, shadowpol)" in r[2] for r in rows[2:])
    assert registry.get("lru", {}).cls.__module__ == "spfcore.policies.lru"
    with pytest.raises(registry.PolicyConfigError, match="'twin' cannot be used: .*uninstall all but one"):
        registry.get("twin", {})
