"""spfcore: KV-cache retention, admission and eviction policies for vLLM's
prefix cache, written as pip-installable plugins and judged against baselines
and a Belady oracle in a simulator and in the real engine."""

from spfcore.contract import CONTRACT_VERSION
from spfcore.hookspecs import hookimpl, hookspec
from spfcore.views import NEVER_ARRIVAL, BlockBatch, BlockTable, BlockView, Hint, RequestView, Score, Scores

__version__ = "0.1.0"
__all__ = ["hookimpl", "hookspec", "BlockView", "RequestView", "Score", "Scores", "BlockBatch", "BlockTable", "Hint", "NEVER_ARRIVAL", "CONTRACT_VERSION",
           "__version__"]
