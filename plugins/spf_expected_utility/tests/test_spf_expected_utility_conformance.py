"""spf_expected_utility against the spfcore contract: the conformance kit's suite, one test per check."""

import pytest

from spfcore.conformance import TestConformance  # noqa: F401


@pytest.fixture
def spfcore_policy():
    return "spf_expected_utility"
