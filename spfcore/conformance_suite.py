"""The conformance suite as a test module: ``pytest --spfcore-policy NAME``
collects this file and runs :class:`spfcore.conformance.TestConformance` once
per named policy (see :mod:`spfcore.conformance`)."""

from spfcore.conformance import TestConformance  # noqa: F401

#: Marks this module for the plugin's parametrization of ``spfcore_policy``.
SPFCORE_CONFORMANCE_SUITE = True
