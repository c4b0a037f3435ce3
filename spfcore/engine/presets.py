"""Embedded model presets: random-weight models defined by a config.json only.

vLLM's ``load_format="dummy"`` builds random weights from a model folder that
holds nothing but ``config.json`` (docs/design.md §5), so no model hub is
needed. KV-cache behaviour does not depend on weight values and timing depends
on the architecture only.

Presets (folders under ``spfcore/engine/models/``):

* ``tiny`` (``tiny-llama``): Llama, 2 layers, hidden 128, 4 heads (head_dim
  32), vocab 32000, max_position_embeddings 16384. The default; fast on CPU.
* ``llama-3.2-3b``: Llama-3.2-3B's architecture (hidden 3072, intermediate
  8192, 28 layers, 24 heads, 8 KV heads, head_dim 128, vocab 128256, tied
  embeddings, rope_theta 500000, llama3 rope scaling factor 32, low 1, high 4,
  original 8192, max_position_embeddings 131072, bfloat16), the SPF seed
  run's model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

MODELS_DIR = Path(__file__).parent / "models"

#: Preset name -> folder under :data:`MODELS_DIR`.
PRESETS: dict[str, str] = {"tiny": "tiny-llama", "tiny-llama": "tiny-llama", "llama-3.2-3b": "llama-3.2-3b"}

DEFAULT_MODEL = "tiny"


def resolve_model(model: str | None) -> tuple[str, str]:
    """Where vLLM loads the model from, and how.

    Args:
        model: ``None`` (the ``tiny`` preset), a preset name (see
            :data:`PRESETS`), or a path to a real checkpoint folder (a
            ``config.json`` plus weights).

    Returns:
        ``(path, load_format)``: ``"dummy"`` for presets (random weights),
        ``"auto"`` for a checkpoint path.

    Raises:
        ValueError: if ``model`` is neither a preset nor a folder holding a
            ``config.json``.
    """
    name = DEFAULT_MODEL if model is None else model
    if name in PRESETS:
        return str(MODELS_DIR / PRESETS[name]), "dummy"
    path = Path(os.path.expanduser(name))
    if path.is_dir() and (path / "config.json").is_file():
        return str(path.resolve()), "auto"
    raise ValueError(f"model {model!r}: not a preset ({', '.join(sorted(PRESETS))}) "
                     f"and not a folder with a config.json")


def model_config(model: str | None) -> dict:
    """The model's ``config.json`` as a dict (e.g. ``vocab_size`` to draw
    workload token ids below it).

    Raises:
        ValueError: as :func:`resolve_model`, or a config.json that is not JSON
            (naming the file and line).
    """
    path, _ = resolve_model(model)
    cfg = Path(path) / "config.json"
    try:
        return json.loads(cfg.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{cfg}:{exc.lineno}: not valid JSON ({exc.msg})") from None
