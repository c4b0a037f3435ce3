"""spfcore's real-engine side: the vLLM adapter, the engine runner and the
embedded model presets.

Nothing here imports vLLM at import time: :mod:`spfcore.engine.vllm_adapter`
(the only module touching vLLM internals) is imported lazily by
:func:`spfcore.engine.runner.open_engine`.
"""

from spfcore.engine.presets import PRESETS, resolve_model
from spfcore.engine.runner import EngineSession, EngineSpec, open_engine

__all__ = ["PRESETS", "EngineSession", "EngineSpec", "open_engine", "resolve_model"]
