"""Block hashes (keys) shared by the simulator and the vLLM adapter.

A key identifies a full block *and* every block before it, like vLLM's chained
block hash (``hash_block_tokens`` in ``vllm/v1/core/kv_cache_utils.py``: the
hash of a block is ``sha256`` (by default) of ``(parent block hash, the
block's token ids, extra keys)``, the parent of block 0 being a fixed
``NONE_HASH``). spfcore does the same with a 128-bit BLAKE2b digest::

    digest[i] = blake2b(parent_i + tag + content_i, digest_size=16)
    parent_0  = ROOT (16 fixed bytes),  parent_i = digest[i-1]   (i >= 1)
    key[i]    = int.from_bytes(digest[i], "big")                 in [0, 2**128)

``tag`` is one byte naming the kind of content, so different kinds never
share an input; ``content`` is the last field, so its length is implied and
each encoding below only has to be one-to-one:

* ``b"T"`` - a block of token ids (engine, synthetic workloads, materialized
  traces): each id as a signed 64-bit little-endian integer
  (:func:`chain_keys`);
* ``b"I"`` - a trace block id (Mooncake ``hash_ids``), any Python int, huge or
  negative: two's-complement big-endian, 8 bytes for ids in int64 range, else
  ``(bit_length + 8) // 8`` bytes (9 or more) (:func:`chain_keys_from_ids`);
* ``b"D"`` - the simulator's unique content of a decode block of a workload
  that does not define its output tokens: ``depth`` (unsigned 64-bit
  little-endian) then the request id as UTF-8 (:func:`decode_key`).

Keys are therefore collision-free for any input up to the digest's 2**-128
odds (Python's ``hash`` of ints is taken modulo 2**61 - 1, which made keys of
different chains equal), equal in every process (no dependence on
PYTHONHASHSEED), and need no intern table (memory does not grow with the
trace). A key is a plain Python int; it is not meant to be stored in a
fixed-width integer array (it exceeds int64 / uint64), and JSON writes it
exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b
from struct import Struct, pack
from struct import error as StructError

#: Bytes of a digest; keys lie in ``[0, 2**(8 * KEY_BYTES))``.
KEY_BYTES = 16
#: The parent of a chain's first block (vLLM: ``NONE_HASH``).
ROOT = b"spfcore.keys.v1\x00"
assert len(ROOT) == KEY_BYTES

_TOKENS, _ID, _DECODE = b"T", b"I", b"D"
_KEY_LIMIT = 1 << (8 * KEY_BYTES)
_I64_MIN, _I64_END = -(1 << 63), 1 << 63


def _parent_bytes(parent: int | None) -> bytes:
    if parent is None:
        return ROOT
    if type(parent) is not int or not 0 <= parent < _KEY_LIMIT:
        raise ValueError(f"parent must be None or a key (an int in [0, 2**{8 * KEY_BYTES})), got {parent!r:.60}")
    return parent.to_bytes(KEY_BYTES, "big")


def _token_bytes(token_ids: Sequence[int]) -> bytes:
    """Token ids as consecutive int64 little-endian (8 bytes each)."""
    try:
        return pack(f"<{len(token_ids)}q", *token_ids)
    except StructError:
        bad = next((t for t in token_ids if isinstance(t, float) or not hasattr(t, "__index__")), None)
        if bad is not None:
            raise TypeError(f"token ids must be ints, got {type(bad).__name__} {bad!r:.60}") from None
        bad = next((t for t in token_ids if not _I64_MIN <= t < _I64_END), "?")
        raise ValueError(f"token id {bad} does not fit in a signed 64-bit integer") from None


_pack_id = Struct(">q").pack


def _id_bytes(b) -> bytes:
    """``b``'s content bytes: ``_pack_id(b)`` (8 bytes) in int64 range, else
    ``(b.bit_length() + 8) // 8`` bytes (>= 9 there), two's complement
    big-endian. One-to-one: the length tells the two ranges apart."""
    if type(b) is not int:
        if isinstance(b, bool) or not hasattr(b, "__index__"):
            raise TypeError(f"block ids must be ints, got {type(b).__name__} {b!r:.60}")
        b = b.__index__()  # numpy integers
    if _I64_MIN <= b < _I64_END:
        return _pack_id(b)
    return b.to_bytes((b.bit_length() + 8) >> 3, "big", signed=True)


def chain_keys(token_ids: Sequence[int], block_size: int, parent: int | None = None) -> list[int]:
    """Keys of the full blocks of ``token_ids``.

    Args:
        token_ids: Prompt (or prompt + output) token ids, ints that fit in a
            signed 64-bit integer; shape ``(n,)``.
        block_size: Tokens per block (> 0).
        parent: Key of the block before ``token_ids[0]``, ``None`` at depth 0.

    Returns:
        ``len(token_ids) // block_size`` keys (ints in ``[0, 2**128)``), in
        chain order; a trailing partial block has no key. ``chain_keys(t[:m *
        block_size], block_size)`` is the first ``m`` keys of
        ``chain_keys(t, block_size)``, and continuing from ``parent=keys[m-1]``
        gives the rest.

    Raises:
        ValueError: ``block_size`` <= 0, a token id outside int64, or a bad
            ``parent``.
        TypeError: a token id that is not an int.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    n = len(token_ids) // block_size
    if n == 0:
        _parent_bytes(parent)
        return []
    buf = _token_bytes(token_ids[: n * block_size])
    step = 8 * block_size
    p = _parent_bytes(parent)
    tag = _TOKENS
    h = blake2b
    fb = int.from_bytes
    keys = []
    append = keys.append
    for start in range(0, n * step, step):
        p = h(p + tag + buf[start : start + step], digest_size=16).digest()
        append(fb(p, "big"))
    return keys


def chain_keys_from_ids(block_ids: Sequence[int], parent: int | None = None) -> list[int]:
    """Keys of a chain whose blocks are named by ids (Mooncake ``hash_ids``).

    Args:
        block_ids: Block ids in chain order, ints of any size and sign
            (numpy integers accepted); shape ``(n,)``.
        parent: Key of the block before ``block_ids[0]``, ``None`` at depth 0.

    Returns:
        ``len(block_ids)`` keys (ints in ``[0, 2**128)``), in chain order.
        Equal id sequences give equal keys; the same id after a different
        prefix gives a different key, as in vLLM; an id never gives the key
        of a token block holding the same number.

    Raises:
        TypeError: an id that is not an int (``bool`` and ``float`` included).
        ValueError: a bad ``parent``.
    """
    p = _parent_bytes(parent)
    contents = None
    if set(map(type, block_ids)) <= {int}:  # the common case: plain ints (no bool), int64 range
        try:
            contents = list(map(_pack_id, block_ids))
        except StructError:
            contents = None
    if contents is None:
        contents = list(map(_id_bytes, block_ids))
    tag = _ID
    h = blake2b
    fb = int.from_bytes
    keys = []
    append = keys.append
    for c in contents:
        p = h(p + tag + c, digest_size=16).digest()
        append(fb(p, "big"))
    return keys


def decode_key(parent: int | None, request_id: str, depth: int) -> int:
    """Key of a decode block with content unique to ``(request_id, depth)``.

    The simulator gives the blocks that become full during decode of a
    request whose output tokens the workload does not define these keys, so
    they never match another request's blocks.

    Args:
        parent: Key of the block before (``None`` at depth 0).
        request_id: The request's id (a string).
        depth: The block's index in the chain (>= 0).

    Returns:
        A key (an int in ``[0, 2**128)``).

    Raises:
        TypeError: ``request_id`` not a string.
        ValueError: bad ``parent`` or ``depth``.
    """
    if not isinstance(request_id, str):
        raise TypeError(f"request_id must be a str, got {type(request_id).__name__}")
    if type(depth) is not int or not 0 <= depth < 1 << 64:
        raise ValueError(f"depth must be an int in [0, 2**64), got {depth!r:.60}")
    data = _parent_bytes(parent) + _DECODE + depth.to_bytes(8, "little") + request_id.encode("utf-8", "surrogatepass")
    return int.from_bytes(blake2b(data, digest_size=16).digest(), "big")
