"""Test-wide settings: hypothesis without per-example deadlines (these 2-core
machines are shared; a concurrent job moves timings 2-4x, and a deadline would
fail a correct test on timing alone); the conformance kit's pytest plugin
(also its pytest11 entry point once spfcore is installed: loaded once either
way) and pytester for testing it."""

from hypothesis import settings

settings.register_profile("spfcore", deadline=None)
settings.load_profile("spfcore")

pytest_plugins = ("pytester", "spfcore.conformance")
