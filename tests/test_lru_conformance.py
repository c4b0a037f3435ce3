"""The built-in lru against the spfcore contract (the plugins under plugins/
run the same suite from their own tests/test_conformance.py)."""

import pytest

from spfcore.conformance import TestConformance  # noqa: F401


@pytest.fixture
def spfcore_policy():
    return "lru"
