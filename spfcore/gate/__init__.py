"""The survival gate: the rule as a pure function of cells
(:mod:`~spfcore.gate.rule`) and its intervals (:mod:`~spfcore.gate.bootstrap`).
It reads cell records only; running them is :mod:`spfcore.run`, showing the
verdict :mod:`spfcore.report`."""

from spfcore.gate.bootstrap import (BOOTSTRAP_LEVEL, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CI, bootstrap_ci, t975,
                                    units_t_interval)
from spfcore.gate.rule import (CRITERION_RANGE, FAILS, INCOMPLETE, INCONCLUSIVE, INVALID_HARNESS, NO_HEADROOM,
                               RULE_CRITERIA, SURVIVES, VERDICTS, Criterion, GateThresholds, Roles, Verdict, evaluate,
                               repeats_to_settle)
from spfcore.run.cell import wasted_share

__all__ = ["BOOTSTRAP_LEVEL", "BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "CI", "CRITERION_RANGE", "FAILS", "INCOMPLETE",
           "INCONCLUSIVE", "INVALID_HARNESS", "NO_HEADROOM", "RULE_CRITERIA", "SURVIVES", "VERDICTS", "Criterion",
           "GateThresholds", "Roles", "Verdict", "bootstrap_ci", "evaluate", "repeats_to_settle", "t975",
           "units_t_interval", "wasted_share"]
