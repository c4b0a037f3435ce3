"""The one request model used by generators, traces, the simulator and the engine runner."""

from __future__ import annotations

import attrs

from spfcore.keys import chain_keys, chain_keys_from_ids
from spfcore.views import RequestView


@attrs.frozen(slots=True)
class Request:
    """One request of a workload.

    Attributes:
        request_id: Unique within the workload.
        arrival_s: Arrival time, seconds from the start of the run (ignored in
            sequential mode, where the next request starts when the previous
            one finishes).
        prompt_token_ids: Prompt tokens. Empty only for hash-id trace requests
            that were not materialized (simulator-only).
        output_tokens: Tokens to generate (>= 1).
        session_id: Session/conversation id, or None.
        prefix_group: Label of the shared prefix (persona id, ...), or None.
        hash_ids: Trace block ids (Mooncake ``hash_ids``), or None.
        hash_block_tokens: Tokens per trace block id (Mooncake: 512).
        num_prompt_tokens: Prompt length, tokens (== len(prompt_token_ids)
            when tokens are given).
        output_token_ids: The output tokens when the workload defines them
            (``multiturn``: the next turn's prompt contains them), else ``()``
            (the simulator then gives decode blocks unique keys).
    """

    request_id: str
    arrival_s: float
    prompt_token_ids: tuple = attrs.field(converter=tuple)
    output_tokens: int
    session_id: str | None = None
    prefix_group: str | None = None
    hash_ids: tuple | None = None
    hash_block_tokens: int = 0
    num_prompt_tokens: int = attrs.field()

    output_token_ids: tuple = attrs.field(default=(), converter=tuple)

    @num_prompt_tokens.default
    def _n(self) -> int:
        return len(self.prompt_token_ids)


@attrs.frozen
class Workload:
    """A named, fully materialized request sequence plus every flag that made it.

    Attributes:
        name: Generator or trace name (``personas``, ``zipf``, ``mooncake`` ...).
        params: Every generator flag / trace option, JSON-serialisable; recorded
            verbatim in results.
        requests: Requests in arrival order.
    """

    name: str
    params: dict
    requests: tuple = attrs.field(converter=tuple)


def block_keys(req: Request, block_size: int) -> tuple:
    """Block hashes of a request's full prompt blocks: keys of
    :mod:`spfcore.keys` (ints in ``[0, 2**128)``, collision-free).

    Token-based when the request has tokens (the engine's view: the adapter
    derives identical keys from the engine's token ids,
    :func:`~spfcore.keys.chain_keys`); id-based for hash-id trace requests at
    their native block size (one key per hash id, the last, partial block
    included, as the trace's reference replay counts;
    :func:`~spfcore.keys.chain_keys_from_ids`).

    Raises:
        ValueError: for a hash-id request without tokens at a foreign block
            size, or a token id outside int64.
        TypeError: a token or hash id that is not an int.
    """
    if req.prompt_token_ids:
        return tuple(chain_keys(req.prompt_token_ids, block_size))
    if req.hash_ids is not None and block_size == req.hash_block_tokens:
        return tuple(chain_keys_from_ids(req.hash_ids))
    raise ValueError(f"request {req.request_id}: no tokens, and block size {block_size} "
                     f"differs from its trace block size {req.hash_block_tokens}")


def request_view(req: Request, arrival_index: int, arrival_time: float, keys: tuple) -> RequestView:
    """The policy-facing view of ``req``."""
    return RequestView(req.request_id, req.session_id, arrival_index, arrival_time,
                       req.num_prompt_tokens, keys, req.prefix_group)
