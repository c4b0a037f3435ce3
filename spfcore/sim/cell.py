"""One simulator cell: an input (a trace, streamed, or a generated workload)
opened and sized once per seed, then replayed for any arm at any cache size.

``spfcore simulate`` replays one :class:`SimInput` per seed for several arms;
``spfcore sweep`` (:mod:`spfcore.sweep`) runs each (input, seed, arm, size)
cell as an independent task through the same object, so both commands share
one replay path (:func:`spfcore.sim.simulator.simulate` /
:func:`~spfcore.sim.simulator.simulate_stream`).
"""

from __future__ import annotations

import attrs

from spfcore.sim.simulator import (Prepared, Scan, ceilings, ceilings_stream, infinite_blocks, iter_plans, prepare,
                                   scan, simulate, simulate_stream)


def default_block_size(workload) -> int:
    """Tokens per block when none is given: a Mooncake trace materialized with
    ``tokens_per_block`` T runs at T (one hash id, one block), a hash-id trace
    (no token ids) at its trace block size (512), everything else at 16.
    ``workload`` is a Workload or a TraceStream (read up to its first hash-id
    request only).

    Raises:
        spfcore.workloads.traces.TraceError: a malformed line before that request.
    """
    tpb = (workload.params or {}).get("tokens_per_block")
    if tpb:
        return tpb
    hashed = next((r.hash_block_tokens for r in workload.requests if not r.prompt_token_ids), None)
    return 16 if hashed is None else hashed


@attrs.define
class SimInput:
    """One seed's simulator input, keyed or scanned at one block size.

    Attributes:
        workload: The Workload or TraceStream (``name``, ``params``,
            ``requests``), e.g. for :meth:`CacheSpec.num_blocks_for`.
        source: What the replay consumes: the TraceStream itself (streamed,
            sequential mode), a :class:`~spfcore.sim.prepared.PreparedStream`
            of it (keyed once, memory-mapped; sequential mode) or a
            :class:`~spfcore.sim.simulator.Prepared`.
        block_size: Tokens per block.
        infinite_blocks: A never-evicting cache size, null block included.
        scanned: The stream's :class:`~spfcore.sim.simulator.Scan` (None when prepared).
    """

    workload: object
    source: object
    block_size: int
    infinite_blocks: int
    scanned: Scan | None = None
    _unique: int | None = None

    @property
    def streaming(self) -> bool:
        """True when the replay reads the trace lazily (bounded memory)."""
        return not isinstance(self.source, Prepared)

    def check_fits(self, num_blocks: int) -> None:
        """Raise the simulator's "does not fit" ``ValueError`` when the
        largest request needs more than ``num_blocks - 1`` blocks."""
        if self.scanned is not None:
            self.scanned.check_fits(self.block_size, num_blocks)
        else:
            from spfcore.sim.simulator import _check_fits

            _check_fits(self.source, num_blocks)

    def unique_blocks(self) -> int:
        """Distinct block hashes the cache ever holds in sequential replay:
        prompt blocks and the blocks filled during decode, each counted once.
        The first call makes one keyed pass (memory: one key per distinct
        block, like ``--cache-pressure``); later calls reuse it."""
        if self._unique is None and hasattr(self.source, "unique_blocks"):  # a PreparedStream counted them
            self._unique = self.source.unique_blocks
        if self._unique is None:
            seen: set = set()
            plans = self.source.plans if not self.streaming else iter_plans(self.source, self.block_size)
            for pl in plans:
                seen.update(pl[2])
                seen.update(pl[3])
            self._unique = len(seen)
        return self._unique

    def run(self, arm: str, *, num_blocks: int, options: dict | None = None, seed: int = 0,
            mode: str = "sequential", max_running: int = 16, token_budget: int | None = None,
            per_request: bool = False, hook_budget_ms: float | None = None, env: dict | None = None) -> dict:
        """Replay this input under ``arm`` at ``num_blocks``: one cell record
        (:func:`spfcore.sim.simulator.simulate`'s fields; ``requests`` only
        with ``per_request``).

        Raises:
            spfcore.registry.PolicyConfigError, spfcore.runtime.PolicyError,
            ValueError, spfcore.workloads.traces.TraceError: as
            :func:`~spfcore.sim.simulator.simulate_stream` /
            :func:`~spfcore.sim.simulator.simulate`.
        """
        if self.streaming:
            if mode != "sequential":
                raise ValueError(f"a streamed trace replays in sequential mode only, got {mode!r}")
            rec = simulate_stream(self.source, arm, options=options, num_blocks=num_blocks,
                                  block_size=self.block_size, seed=seed, per_request=per_request,
                                  hook_budget_ms=hook_budget_ms, env=env)
        else:
            rec = simulate(self.source, arm, options=options, num_blocks=num_blocks, block_size=self.block_size,
                           mode=mode, max_running=max_running, token_budget=token_budget, seed=seed,
                           hook_budget_ms=hook_budget_ms, env=env)
            if not per_request:
                rec.pop("requests", None)
        return rec

    def ceilings(self, num_blocks: int, belady_record: dict | None = None) -> dict:
        """The infinite-cache and Belady ceilings at ``num_blocks``
        (:func:`spfcore.sim.simulator.ceilings`)."""
        if self.streaming:
            return ceilings_stream(self.source, num_blocks=num_blocks, block_size=self.block_size,
                                   belady_record=belady_record, infinite=self.infinite_blocks)
        return ceilings(self.source, num_blocks=num_blocks, block_size=self.block_size, belady_record=belady_record)


def open_input(workload_spec, seed: int, block_size: int | None = None, mode: str = "sequential") -> SimInput:
    """Open ``workload_spec`` (:class:`spfcore.workloads.options.WorkloadSpec`)
    for ``seed``: a trace in sequential mode is streamed and scanned once (no
    keys kept); anything else is built and keyed in memory
    (:func:`~spfcore.sim.simulator.prepare`).

    Args:
        block_size: Tokens per block; None: :func:`default_block_size`.

    Raises:
        spfcore.workloads.options.WorkloadOptionError: bad generator flag, or an empty or unknown trace.
        spfcore.workloads.traces.TraceError: a malformed trace line.
        ValueError: keys not computable at this block size.
    """
    if workload_spec.trace is not None and mode == "sequential":
        src = workload_spec.stream(seed)
        bs = block_size or default_block_size(src)
        sc = scan(src, bs)
        return SimInput(src, src, bs, sc.infinite_blocks, sc)
    wl = workload_spec.build(seed)
    bs = block_size or default_block_size(wl)
    prep = prepare(wl, bs)
    return SimInput(wl, prep, bs, infinite_blocks(prep, bs))
