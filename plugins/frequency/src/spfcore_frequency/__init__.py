"""The ``frequency`` arm: LFU-style admission with ghost counts (the comparator).

In the spirit of TinyLFU (Einziger, Friedman, Manes 2017, "TinyLFU: a highly
efficient cache admission policy"): a block is retained only once its block
hash has been seen often enough, and the history of evicted hashes is kept
(bounded) so a hash seen again after its eviction still counts.
"""

from __future__ import annotations

from collections import Counter, deque
from itertools import compress, filterfalse, islice, repeat

import attrs
import numpy as np
from attrs import validators as v

from spfcore import hookimpl

#: ``FrequencyPolicy._listed`` before the ghost list was first listed: a trim reads nothing from it, so
#: which hashes moved until then does not matter (they are not recorded).
_UNLISTED = iter(())


@attrs.frozen
class FrequencyParams:
    """Parameters of ``frequency``.

    Attributes:
        min_count: Accesses (stores + hits, over the block hash's history
            including ghost counts) a block needs to be admitted (int >= 1).
        ghost_factor: Ghost entries kept for evicted block hashes, as a
            multiple of the pool size in blocks (int >= 0; 0 keeps none).
        tier_order: Eviction order of a slower KV tier (contract 1.2):
            ``count`` (lowest access count first) or ``lru`` (vLLM's tier
            order; admission still applies).
    """

    min_count: int = attrs.field(default=2, validator=[v.instance_of(int), v.ge(1)])
    ghost_factor: int = attrs.field(default=4, validator=[v.instance_of(int), v.ge(0)])
    tier_order: str = attrs.field(default="count", validator=v.in_(("count", "lru")))


class FrequencyPolicy:
    """Admit a block once its hash was seen ``min_count`` times; evict the
    lowest access count first, LRU on ties.

    Per cached block hash the policy counts accesses: a store counts 1 plus
    the ghost count the hash left when it was last evicted, each hit adds 1
    (one per request). Evicted hashes keep their count in an LRU-bounded
    ``dict`` (insertion-ordered) of ``ghost_factor * num_blocks`` entries.

    A block whose count is below ``min_count`` is not admitted: it is evicted
    before every admitted block. Within a tier the score is the count (lowest
    evicted first); equal counts fall back to the evictor's release order
    (vLLM's LRU). Scores are fixed at release: counts change only on hits and
    stores, and a hit takes the block out of the free queue, so no expiry is
    needed. Costs: O(1) per block per hook, O(log v) per victim for v
    distinct scores (the evictor groups blocks by score).

    With a slower KV tier (CPU memory, contract 1.2) the same rule applies
    there: a computed block is copied to the tier only once its count
    reaches ``min_count`` (:func:`~spfcore.hookspecs.spfcore_tier_admit`:
    a prefix seen before, not a one-off query), and the tier evicts the
    lowest count first (:func:`~spfcore.hookspecs.spfcore_tier_score`, ties
    least recently ranked first). vLLM's tier copies every block and evicts
    LRU: on a cyclic working set larger than the tier it hits nothing.

    The simulator's sequential replay of this class (not of a subclass) is
    compiled (:mod:`spfcore.sim._replay_freq_nb`): a change to the counts,
    the ghost list, admission or the score needs the same change there
    (``tests/test_sim_compiled.py`` compares every decision).
    """

    name = "frequency"
    contract = "1.3"  # the spfcore contract version this policy is written for (1.2: tier hooks; 1.3: keys-only)
    # keys-only: the hooks read blocks.keys alone, so the runtime writes no other column
    capabilities = frozenset({"admission", "scoring", "keys-only"})
    Params = FrequencyParams

    def __init__(self, params: FrequencyParams | None = None) -> None:
        self.params = params or FrequencyParams()
        self.count: Counter = Counter()
        # evicted hash -> its count, least recently evicted first (a plain dict keeps insertion
        # order: an entry moves to the end by pop and set). The oldest leave by a trim, which reads
        # them from ``_listed``: an iterator over the ghost list's hashes as they stood when last
        # listed, skipping those in ``_moved`` (stored again, or evicted again, since that listing:
        # gone, or placed anew at the end); every other listed hash is still there, in its listed
        # order. Once the iterator runs out the ghost list is listed anew (O(1) per trimmed hash
        # over time). Reading the oldest from the dict itself walks every slot freed at its front
        # since the dict last resized (or was copied to drop them: issue 19's cells at 300,000
        # blocks, a 1.2M-entry list, spent most of their time on those walks and copies). Until the
        # first listing (``_UNLISTED``) no move is recorded: the first listing starts ``_moved`` anew
        self.ghost: dict[object, int] = {}
        self._listed, self._moved = _UNLISTED, set()
        self.ghost_cap = 0
        self._counted = (None, None)  # (batch, counts) of the last admission call, for its score call

    @hookimpl
    def spfcore_cache_configured(self, num_blocks, block_size):
        self.count, self.ghost = Counter(), {}
        self._listed, self._moved = _UNLISTED, set()
        self.ghost_cap = self.params.ghost_factor * num_blocks

    @hookimpl
    def spfcore_blocks_stored(self, request, blocks, now):
        count, ghost, keys = self.count, self.ghost, blocks.keys
        if ghost.keys().isdisjoint(keys):  # no ghost count comes back (the usual store): +1 per occurrence
            count.update(keys)  # a Counter, in C
            return
        moved = self._moved  # hashes that leave the ghost list go there
        if count.keys().isdisjoint(keys):  # none cached now: in C-level calls
            n0 = len(count)
            back = list(map(ghost.pop, keys, repeat(0)))  # each its ghost count (or 0) + 1
            if self._listed is not _UNLISTED:
                moved.update(compress(keys, back))
            dict.update(count, zip(keys, map((1).__add__, back)))
            if len(count) - n0 == len(keys):
                return
            for k in set(keys):  # a hash twice: its first ghost count + 1 per occurrence, as one by one
                del count[k]
            for k, c in zip(keys, back):
                count[k] = count.get(k, 0) + c + 1
            return
        for k in keys:  # count = (count if cached else ghost count) + 1
            if k in count:
                count[k] += 1
            else:
                c = count[k] = ghost.pop(k, 0) + 1
                if c > 1 and self._listed is not _UNLISTED:
                    moved.add(k)

    @hookimpl
    def spfcore_blocks_hit(self, request, blocks, now):
        self.count.update(blocks.keys)  # a Counter: +1 per key, in C

    @hookimpl
    def spfcore_blocks_evicted(self, keys, now):
        count, ghost, cap = self.count, self.ghost, self.ghost_cap
        cs = list(map(count.pop, keys, repeat(None)))
        if cap:
            n0 = len(ghost)
            if None not in cs:  # the usual case: appended in order, in C
                ghost.update(zip(keys, cs))
            if None in cs or len(ghost) != n0 + len(keys):  # some were there already: each to the newest end
                for k, c in zip(keys, cs):
                    if c is not None:
                        if ghost.pop(k, None) is not None and self._listed is not _UNLISTED:
                            self._moved.add(k)
                        ghost[k] = c
        over = len(ghost) - cap
        while over > 0:  # the least recently evicted leave, in C
            # (a listed hash not moved since is still in the ghost list, in its listed order)
            gone = list(islice(filterfalse(self._moved.__contains__, self._listed), over))
            deque(map(ghost.__delitem__, gone), maxlen=0)
            over -= len(gone)
            if over:  # the listing ran out: list the ghost list anew, as it stands
                self._listed, self._moved = iter(list(ghost)), set()

    def counts(self, blocks) -> np.ndarray:
        """Access count per block of a batch (float64 array, 1 for an unknown hash)."""
        return np.fromiter(map(self.count.get, blocks.keys, repeat(1)), np.float64, len(blocks))

    @hookimpl
    def spfcore_admit_blocks(self, blocks, now):
        c = self.counts(blocks)
        self._counted = (blocks, c)  # the score call that follows reads the same counts
        return c >= self.params.min_count

    @hookimpl
    def spfcore_score_blocks(self, blocks, now):
        b, c = self._counted
        self._counted = (None, None)
        return c if b is blocks else self.counts(blocks)

    def _count_of(self, k) -> int:
        """Access count of block hash ``k``: cached, else its ghost count, else 1."""
        c = self.count.get(k)
        return self.ghost.get(k, 1) if c is None else c

    @hookimpl
    def spfcore_tier_admit(self, request, keys, now):
        return np.fromiter(map(self._count_of, keys), np.int64, len(keys)) >= self.params.min_count

    @hookimpl
    def spfcore_tier_score(self, request, keys, now):
        if self.params.tier_order == "lru":
            return None
        return np.fromiter(map(self._count_of, keys), np.float64, len(keys))


__all__ = ["FrequencyPolicy", "FrequencyParams"]
