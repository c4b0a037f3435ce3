"""Synthetic Mooncake-format traces for benchmarks (``spfcore make-trace``).

The shape follows the Mooncake conversation trace (FAST'25): every prompt
starts with ``common_blocks`` blocks shared by all requests (the chat
template's preamble, id ``0`` onwards), then one of ``system_prompts`` system
prompts picked by a Zipf law (rank ``r`` (1-based) with probability
proportional to ``r**-zipf_alpha``; prompt ``r`` is ``1 .. max_system_blocks``
blocks long, fixed per prompt), then the conversation. ``sessions``
conversations are open at once; each request continues a uniformly drawn one.
A conversation's turn ``t > 0`` has the prompt ``P_t = P_{t-1} + O_{t-1} +
Q_t`` (previous prompt, previous answer, new query) and keeps the previous
prompt's *full* 512-token blocks' ids (its partial last block changed, so it
gets a fresh id); turn 0 is preamble + system prompt + a first query. After
each turn a conversation ends with probability ``1 / mean_turns`` (or when its
prompt would exceed ``max_context_blocks`` blocks) and a new one takes its
slot. Query and answer lengths are log-normal (medians ``first_query_tokens``,
``query_tokens``, ``output_tokens``); arrivals are a Poisson process of
``rate`` requests/s, timestamps in integer milliseconds.

Memory is bounded by the open conversations (``sessions x
max_context_blocks`` ids), not by the number of requests: requests are
yielded one at a time and written as they come. Fresh block ids come from one
counter, so they never collide (they grow to about the number of distinct
blocks, e.g. ~1e8 for 10M requests). Output is a pure function of the shape
and ``seed`` (one ``numpy.random.default_rng(seed)``, drawn in fixed-size
chunks), so the same seed gives the same bytes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import attrs
import numpy as np

from spfcore.fileio import write_atomic
from spfcore.workloads.traces import MOONCAKE_BLOCK_TOKENS

#: Requests whose random draws are made at once (part of the output's
#: definition: changing it changes every trace).
_CHUNK = 4096


def _pos(inst, attr, value):
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{attr.name} must be > 0 and finite, got {value}")


def _nonneg(inst, attr, value):
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{attr.name} must be >= 0 and finite, got {value}")


@attrs.frozen
class TraceShape:
    """How a synthetic trace looks (see the module doc).

    Attributes:
        sessions: Conversations open at once.
        mean_turns: Mean turns per conversation (geometric).
        system_prompts: Distinct system prompts.
        zipf_alpha: Zipf exponent of system-prompt popularity.
        max_system_blocks: Longest system prompt, 512-token blocks.
        common_blocks: Blocks every prompt starts with (0: none).
        first_query_tokens: Median first-turn query, tokens.
        query_tokens: Median later-turn query, tokens.
        output_tokens: Median answer, tokens.
        sigma: Log-normal shape of query and answer lengths.
        max_context_blocks: Longest prompt, blocks; a conversation that would
            grow past it ends and its turn starts a new conversation.
        rate: Mean arrivals per second (Poisson).

    Raises:
        ValueError: a count below 1, or a non-positive rate, length or alpha.
    """

    sessions: int = attrs.field(default=256, validator=_pos)
    mean_turns: float = attrs.field(default=2.0, validator=_pos)
    system_prompts: int = attrs.field(default=64, validator=_pos)
    zipf_alpha: float = attrs.field(default=1.1, validator=_nonneg)
    max_system_blocks: int = attrs.field(default=6, validator=_pos)
    common_blocks: int = attrs.field(default=1, validator=_nonneg)
    first_query_tokens: float = attrs.field(default=4000.0, validator=_pos)
    query_tokens: float = attrs.field(default=600.0, validator=_pos)
    output_tokens: float = attrs.field(default=300.0, validator=_pos)
    sigma: float = attrs.field(default=0.8, validator=_nonneg)
    max_context_blocks: int = attrs.field(default=240, validator=_pos)
    rate: float = attrs.field(default=3.4, validator=_pos)

    def __attrs_post_init__(self) -> None:
        if self.mean_turns < 1:
            raise ValueError(f"mean_turns must be >= 1, got {self.mean_turns}")
        if self.common_blocks + self.max_system_blocks + 1 > self.max_context_blocks:
            raise ValueError(f"max_context_blocks ({self.max_context_blocks}) leaves no room after "
                             f"{self.common_blocks} common + {self.max_system_blocks} system-prompt blocks")


def iter_synthetic(requests: int, seed: int, shape: TraceShape | None = None) -> Iterator[dict]:
    """Yield ``requests`` Mooncake trace rows ``{"timestamp", "input_length",
    "output_length", "hash_ids"}`` (ms, tokens, tokens, 512-token block ids;
    ``len(hash_ids) == ceil(input_length / 512)``), in arrival order, one at
    a time (memory: the open conversations only).

    Raises:
        ValueError: ``requests < 0`` or ``seed < 0``.
    """
    if requests < 0 or seed < 0:
        raise ValueError(f"requests and seed must be >= 0, got {requests}, {seed}")
    shape = shape or TraceShape()
    bt = MOONCAKE_BLOCK_TOKENS
    rng = np.random.default_rng(seed)
    # system prompts: ids after the common preamble, lengths fixed per prompt
    sys_len = rng.integers(1, shape.max_system_blocks + 1, size=shape.system_prompts)
    common = list(range(shape.common_blocks))
    next_id = shape.common_blocks
    sys_ids = []
    for n in sys_len.tolist():
        sys_ids.append(common + list(range(next_id, next_id + n)))
        next_id += n
    w = np.arange(1, shape.system_prompts + 1, dtype=float) ** -shape.zipf_alpha
    cdf = np.cumsum(w / w.sum())
    # open conversations: slot -> (hash ids, prompt tokens, answer tokens); a free slot is absent (a dict, not
    # a list of shape.sessions: memory follows the conversations opened, at most one per request)
    slots: dict[int, tuple[list, int, int]] = {}
    p_end = 1.0 / shape.mean_turns
    mu_first, mu_q, mu_o = math.log(shape.first_query_tokens), math.log(shape.query_tokens), \
        math.log(shape.output_tokens)
    t_ms = 0.0
    done = 0
    while done < requests:
        n = min(_CHUNK, requests - done)
        gaps = rng.exponential(1000.0 / shape.rate, size=n).tolist()
        slot_of = rng.integers(0, shape.sessions, size=n).tolist()
        ends = (rng.random(size=n) < p_end).tolist()
        pick = np.minimum(np.searchsorted(cdf, rng.random(size=n), side="right"), shape.system_prompts - 1).tolist()
        q_first = np.maximum(1, rng.lognormal(mu_first, shape.sigma, size=n)).astype(np.int64).tolist()
        q_next = np.maximum(1, rng.lognormal(mu_q, shape.sigma, size=n)).astype(np.int64).tolist()
        outs = np.maximum(1, rng.lognormal(mu_o, shape.sigma, size=n)).astype(np.int64).tolist()
        for j in range(n):
            t_ms += gaps[j]
            s = slot_of[j]
            conv = slots.get(s)
            if conv is not None:
                ids, p_prev, o_prev = conv
                p = p_prev + o_prev + q_next[j]
                if -(-p // bt) > shape.max_context_blocks:
                    conv = None  # too long: this turn opens a new conversation
            if conv is None:
                base = sys_ids[pick[j]]
                p = len(base) * bt + q_first[j]
                p = min(p, shape.max_context_blocks * bt)
                keep = list(base)
            else:
                keep = ids[: p_prev // bt]  # the previous prompt's full blocks
            total = -(-p // bt)
            fresh = total - len(keep)
            hids = keep + list(range(next_id, next_id + fresh))
            next_id += fresh
            yield {"timestamp": round(t_ms), "input_length": p, "output_length": outs[j], "hash_ids": hids}
            if ends[j]:
                slots.pop(s, None)
            else:
                slots[s] = (hids, p, outs[j])
        done += n


def write_synthetic(path: str | os.PathLike, requests: int, seed: int, shape: TraceShape | None = None) -> Path:
    """Write :func:`iter_synthetic`'s rows as Mooncake JSONL to ``path``,
    streamed (memory does not grow with ``requests``) and atomically (a
    temporary file moved into place: an interrupted run leaves no file).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: bad ``requests``, ``seed`` (nothing written).
        OSError: the folder cannot be written.
    """
    if requests < 0 or seed < 0:
        raise ValueError(f"requests and seed must be >= 0, got {requests}, {seed}")

    def lines():
        for r in iter_synthetic(requests, seed, shape):
            yield (f'{{"timestamp": {r["timestamp"]}, "input_length": {r["input_length"]}, '
                   f'"output_length": {r["output_length"]}, "hash_ids": [{", ".join(map(str, r["hash_ids"]))}]}}')

    return write_atomic(path, lines())
