"""Trace-driven simulator of vLLM v1's paged prefix cache (see
:mod:`spfcore.sim.simulator` for the model)."""

from spfcore.sim.simulator import (Prepared, Scan, ceilings, ceilings_stream, infinite_blocks, iter_plans, iter_views,
                                   prepare, scan, simulate, simulate_stream)
from spfcore.sim.simulator import _check_fits as check_fits  # (prepared, num_blocks): ValueError if a request cannot fit

__all__ = ["Prepared", "Scan", "ceilings", "check_fits", "ceilings_stream", "infinite_blocks", "iter_plans", "iter_views",
           "prepare", "scan", "simulate", "simulate_stream"]
