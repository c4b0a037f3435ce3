"""Test-wide settings: hypothesis without per-example deadlines (these 2-core
machines are shared; a concurrent job moves timings 2-4x, and a deadline would
fail a correct test on timing alone)."""

from hypothesis import settings

settings.register_profile("spfcore", deadline=None)
settings.load_profile("spfcore")
