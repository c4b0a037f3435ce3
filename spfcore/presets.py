"""The gate's presets: the seed's arms, seeds and roles, and the workload,
cache and engine of ``spfcore gate --preset``. The core (rule, pipeline,
store) names no policy; only these defaults do, so a plain ``spfcore gate``
needs the shipped plugins installed while ``--arms``/``--candidate``/... need
only the arms they name.
"""

from __future__ import annotations

from spfcore.gate.rule import Roles

#: The shipped arms, in the order tables list them.
DEFAULT_ARMS = ("lru", "session_ttl", "frequency", "spf_expected_utility", "belady_oracle")
#: The seed's three deterministic seeds.
DEFAULT_SEEDS = (42, 43, 44)
#: The seed's roles (docs/design.md §1): spf on trial, session_ttl to beat, lru the
#: throughput floor, the simulator's Belady as the ceiling.
SEED_ROLES = Roles(candidate="spf_expected_utility", baseline="session_ttl", floor="lru", oracle="belady_oracle")

#: Presets: the workload, cache and engine of a run. ``seed`` is the SPF
#: seed's published workload (docs/design.md §1) on the embedded tiny model; its
#: block size is vLLM's default for the platform (16 on a GPU, as the seed; 32 on CPU,
#: whose attention needs a multiple of 32: :func:`spfcore.engine.runner.default_block_size`).
#: Add ``--model llama-3.2-3b`` for the seed's architecture. ``quick`` is the same shape
#: (16 personas, 32 sessions x 4 turns, round robin, pressure 2.3) with 16x shorter prompts,
#: for a 2-core CPU.
PRESETS = {
    "seed": {
        "workload": "personas",
        "workload_flags": {"personas": 16, "prefix_tokens": 8192, "sessions": 32, "turns": 4,
                           "query_tokens": 128, "output_tokens": 32, "order": "round_robin"},
        "block_size": "auto", "cache_pressure": 2.3, "engine": {"model": "tiny", "max_model_len": 12288},
    },
    "quick": {
        "workload": "personas",
        "workload_flags": {"personas": 16, "prefix_tokens": 512, "sessions": 32, "turns": 4,
                           "query_tokens": 32, "output_tokens": 4, "order": "round_robin"},
        "block_size": 32, "cache_pressure": 2.3, "engine": {"model": "tiny"},
    },
}


def block_size(preset: dict) -> int:
    """The preset's block size, tokens; ``auto``: the engine's default for this
    platform (:func:`spfcore.engine.runner.default_block_size`, which imports vLLM)."""
    if preset["block_size"] != "auto":
        return preset["block_size"]
    from spfcore.engine.runner import default_block_size

    return default_block_size()
