"""belady_oracle against the spfcore contract: the conformance kit's suite, one test per check."""

import pytest

from spfcore.conformance import TestConformance  # noqa: F401


@pytest.fixture
def spfcore_policy():
    return "belady_oracle"
