"""The versioned contract: version and digest move together; the registry
refuses incompatible plugins with the reason; list-policies --json carries the
publishing metadata."""

import json
import textwrap

import pytest
from click.testing import CliRunner

import spfcore
from spfcore import contract, hookspecs, registry, views
from spfcore.cli import main

SHIPPED = ("lru", "session_ttl", "frequency", "spf_expected_utility", "belady_oracle")


def test_contract_digest_matches_the_recorded_one():
    # On failure: the hook specs, views or answer types changed. Bump
    # CONTRACT_VERSION in spfcore/contract.py (major: old plugins can break;
    # minor: additions) and record the new digest as CONTRACT_DIGEST.
    assert contract.contract_digest() == contract.CONTRACT_DIGEST, (
        "the policy contract changed without a version bump: update CONTRACT_VERSION and CONTRACT_DIGEST "
        "in spfcore/contract.py")
    assert spfcore.CONTRACT_VERSION == contract.CONTRACT_VERSION
    assert contract.parse(spfcore.CONTRACT_VERSION)[0] >= 1


def _renamed_argument(keys, when):  # spfcore_blocks_evicted with an argument renamed
    """."""


@pytest.mark.parametrize("change", ["hook argument", "new column", "answer field", "firstresult"])
def test_every_kind_of_contract_change_moves_the_digest(monkeypatch, change):
    before = contract.contract_digest()
    if change == "hook argument":
        monkeypatch.setattr(hookspecs, "spfcore_blocks_evicted", _renamed_argument)
    elif change == "new column":
        monkeypatch.setattr(views.BlockBatch, "priority", property(lambda self: None), raising=False)
    elif change == "answer field":
        import attrs

        monkeypatch.setattr(views, "Hint", attrs.make_class("Hint", ["keys", "expires_at_arrival", "weight"]))
    else:
        fn = hookspecs.spfcore_blocks_evicted
        monkeypatch.setattr(fn, "spfcore_spec", {**fn.spfcore_spec, "firstresult": True})
    assert contract.contract_digest() != before


@pytest.mark.parametrize("declared, why", [
    ("1.0", None), ("1", "is not MAJOR.MINOR"), ("1.0.7", None), (None, None),
    ("2.0", "major versions differ"), ("0.9", "major versions differ"), ("1.1", "upgrade spfcore"),
    (1.0, "is not MAJOR.MINOR"), ("1.0-beta", "is not MAJOR.MINOR")])
def test_incompatibility(declared, why):
    got = contract.incompatibility(declared, "1.0.3")
    assert (got is None) if why is None else (why in got), got


def test_compatible_spfcore_range():
    assert contract.compatible_spfcore_range("0.1.0") == "spfcore>=0.1,<0.2"
    assert contract.compatible_spfcore_range("0.4.2") == "spfcore>=0.4,<0.5"
    assert contract.compatible_spfcore_range("1.3.0") == "spfcore>=1.3,<2"


def test_every_shipped_policy_declares_the_current_contract():
    infos = registry.by_name({})
    for name in SHIPPED:
        assert infos[name].status == "ok", infos[name].status
        # frequency: tier hooks (1.2) and keys-only (1.3); session_ttl: capability keys-only (1.3);
        # belady_oracle, spf_expected_utility: capability chain-only (1.4)
        assert infos[name].contract == {"frequency": "1.3", "session_ttl": "1.3", "belady_oracle": "1.4",
                                        "spf_expected_utility": "1.4"}.get(name, "1.0")
        assert contract.incompatibility(infos[name].contract) is None


@pytest.fixture
def contract_dist(tmp_path, monkeypatch):
    """A throw-away distribution with a policy for another contract major,
    one for a future minor, and one with a home page and no declaration."""
    (tmp_path / "contractpol.py").write_text(textwrap.dedent('''
        import attrs
        from spfcore import hookimpl

        @attrs.frozen
        class P:
            """No parameters."""

        class Old:
            """Written for contract 0.3."""
            name = "old_contract"
            contract = "0.3"
            capabilities = frozenset()
            Params = P
            def __init__(self, params):
                self.params = params

        class Future(Old):
            """Written for a newer minor."""
            name = "future_contract"
            contract = "1.9"

        class Plain(Old):
            """Declares nothing."""
            name = "plain_contract"
            contract = None

        class KeysOnlyAt10(Old):
            """Uses capability keys-only (1.3) but declares 1.0."""
            name = "keys_only_at_10"
            contract = "1.0"
            capabilities = frozenset({"keys-only"})

        class OrderedAt10(Old):
            """Implements spfcore_evict_blocks (1.1) but declares 1.0."""
            name = "ordered_at_10"
            contract = "1.0"
            @hookimpl
            def spfcore_evict_blocks(self, n, free, now):
                return list(free)[:n]
    '''))
    info = tmp_path / "contractpol-0.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: contractpol\nVersion: 0.2\n"
                                   "Project-URL: Homepage, https://example.org/contractpol\n")
    (info / "entry_points.txt").write_text("[spfcore.policies]\nold_contract = contractpol:Old\n"
                                           "future_contract = contractpol:Future\nplain_contract = contractpol:Plain\n"
                                           "keys_only_at_10 = contractpol:KeysOnlyAt10\n"
                                           "ordered_at_10 = contractpol:OrderedAt10\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_registry_refuses_an_incompatible_contract_with_the_reason(contract_dist):
    infos = registry.by_name({})
    assert infos["old_contract"].status == (
        "error: TypeError: incompatible contract: written for contract 0.3, this spfcore implements contract "
        f"{contract.CONTRACT_VERSION} (major versions differ: install a spfcore whose contract is 0.x)")
    assert infos["future_contract"].status.startswith(
        "error: TypeError: incompatible contract: written for contract 1.9, newer than this spfcore's contract")
    assert infos["plain_contract"].status == "ok" and infos["plain_contract"].contract is None
    # a capability or hook of a later contract than the one declared (an older core would refuse or skip it)
    assert infos["keys_only_at_10"].status == (
        "error: TypeError: incompatible contract: capability 'keys-only' is part of contract 1.3, "
        'the policy declares 1.0 (declare contract = "1.3")')
    assert infos["ordered_at_10"].status == (
        "error: TypeError: incompatible contract: hook 'spfcore_evict_blocks' is part of contract 1.1, "
        'the policy declares 1.0 (declare contract = "1.1")')
    with pytest.raises(registry.PolicyConfigError, match="incompatible contract"):
        registry.get("old_contract", {})


def test_newer_than_declared_names_the_first_later_feature():
    assert contract.newer_than_declared(None, {"keys-only"}, ()) is None  # undeclared: nothing to compare
    assert contract.newer_than_declared("1.3", {"keys-only", "ordered"}, ("spfcore_evict_blocks",)) is None
    assert contract.newer_than_declared("1.1", {"ordered"}, ("spfcore_tier_score",)).startswith(
        "hook 'spfcore_tier_score' is part of contract 1.2, the policy declares 1.1")
    assert contract.newer_than_declared("1.2.7", {"keys-only"}, ()).startswith(
        "capability 'keys-only' is part of contract 1.3, the policy declares 1.2.7")
    # everything 1.0 had needs no newer declaration
    assert contract.newer_than_declared("1.0", {"scoring", "pins", "sessions", "prefetch", "admission",
                                                "needs-future"}, ("spfcore_score_blocks",)) is None


def test_list_policies_json_gives_publishing_metadata(contract_dist):
    res = CliRunner().invoke(main, ["list-policies", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)}
    freq = rows["frequency"]
    assert (freq["distribution"], freq["version"], freq["contract"]) == ("spfcore-frequency", "0.1.0", "1.3")
    assert freq["summary"].startswith("Admit a block once its hash was seen")
    assert "homepage" in freq
    plain = rows["plain_contract"]
    assert (plain["homepage"], plain["contract"], plain["version"]) == ("https://example.org/contractpol", None, "0.2")
    assert rows["old_contract"]["status"].startswith("error: TypeError: incompatible contract")


@pytest.mark.parametrize("bad", ["1", "1.3\n", " 1.0", "01.3", "1.0.0.0", "1.x", "", 1.3, None])
def test_parse_refuses_what_is_not_major_minor_patch(bad):
    with pytest.raises(ValueError, match="is not MAJOR.MINOR or MAJOR.MINOR.PATCH"):
        contract.parse(bad)


@pytest.mark.parametrize("declared", ["1", "1.3\n", 1.3, "2.0"])
def test_an_unparsable_or_other_major_declaration_is_incompatibilitys_to_report(declared):
    # newer_than_declared leaves it to incompatibility(), which the registry checks first
    assert contract.newer_than_declared(declared, {"keys-only"}, ("spfcore_tier_score",)) is None
    assert contract.incompatibility(declared) is not None
