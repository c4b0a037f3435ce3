"""The classic policies against the spfcore contract: the conformance kit's suite, one test per check."""

import pytest

from spfcore.conformance import TestConformance  # noqa: F401


@pytest.fixture(params=["arc", "gdsf", "lirs", "s3fifo", "sieve", "twoq"])
def spfcore_policy(request):
    return request.param
