"""Trace-driven simulator of vLLM v1's paged prefix cache (see
:mod:`spfcore.sim.simulator` for the model)."""

from spfcore.sim.simulator import Prepared, ceilings, infinite_blocks, prepare, simulate

__all__ = ["Prepared", "ceilings", "infinite_blocks", "prepare", "simulate"]
