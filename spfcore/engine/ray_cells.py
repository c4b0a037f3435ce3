"""The gate's engine cells on a Ray cluster: one engine per actor (one actor
per GPU), one seed per actor task, every arm of that seed on that one engine.

Why seeds, not cells, are the unit: the gate's throughput criterion compares
arms with each other (regression vs ``lru`` < 1%). Two arms measured on two
different GPUs differ by the GPUs as well as by the policy; two arms on one
engine, interleaved, differ by the policy alone (plus noise). So an actor
runs :func:`spfcore.run.pipeline.run_engine_cells` - the gate's own loop:
one engine, ``use_policy`` between arms, an unrecorded warm-up, the arm order
rotated per seed - for one seed, and the seeds spread over the GPUs. With S
seeds and G GPUs the engine part takes about ``ceil(S / G)`` times one seed's
time instead of S times.

Use: ``run_gate(config, output, engine_cells=RayEngineCells("auto"))``
(or :func:`run_gate_on_ray`). Everything else in the gate - the simulator
cells, the sidecar (resume), the verdict, the files - is unchanged and runs
in the driver. Requirements: spfcore and the arms' plugins installed on every
node (or a Ray ``runtime_env``); the model (a preset or a checkpoint folder at
the same path) on every node.

Each finished cell gets ``"runner": {"ray_node", "pid", "gpu_ids"}``, so a
result says where it was measured.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import attrs


class _NoBar:
    """tqdm's surface, silent (the actor's progress is the driver's bar)."""

    def set_description(self, *_a, **_k) -> None:
        pass

    def update(self, *_a, **_k) -> None:
        pass


class _Cells:
    """The sidecar surface :func:`~spfcore.run.pipeline.run_engine_cells`
    writes to (``done``, ``put``), in memory."""

    def __init__(self, done: set) -> None:
        self.done = {k: True for k in done}
        self.new: list[tuple] = []

    def put(self, kind, arm, seed, cell, repeat: int = 0) -> None:
        """As the gate sidecar's ``put`` (``repeat`` > 0: a further pass; Ray runs only pass 0)."""
        self.new.append((kind, arm, seed, cell))
        if not cell.get("error"):
            self.done[(kind, arm, seed) + ((repeat,) if repeat else ())] = True


def run_seed(config, workload, seed: int, rotation: int, num_blocks: int, done: set, broken: Mapping,
             engine_factory=None) -> list[tuple]:
    """Run one seed's engine cells not in ``done`` on one engine, in this
    process, through the gate's own loop; return ``[(kind, arm, seed, cell)]``.

    Args:
        config: The :class:`spfcore.run.spec.GateConfig`.
        workload: The seed's workload.
        seed: The seed.
        rotation: The seed's index in ``config.seeds`` (the arm order is
            rotated by it, as the gate does on one engine).
        num_blocks: Cache size, null block included.
        done: ``{("engine", arm, seed)}`` already finished.
        broken: ``{arm: exception}`` of arms that cannot run.
        engine_factory: As :func:`spfcore.run.pipeline.run_gate`'s (default: the real engine).
    """
    from spfcore.run.pipeline import run_engine_cells, default_engine_factory

    arms = list(config.arms)
    k = rotation % len(arms)
    cfg = attrs.evolve(config, arms=tuple(arms[k:] + arms[:k]), seeds=(seed,))
    side = _Cells(done)
    run_engine_cells(cfg, {seed: workload}, side, _NoBar(), engine_factory or default_engine_factory, num_blocks,
                      broken=dict(broken))
    where = {"pid": os.getpid()}
    try:
        import ray

        ctx = ray.get_runtime_context()
        where.update(ray_node=ctx.get_node_id(), gpu_ids=[str(g) for g in ray.get_gpu_ids()])
    except Exception:  # noqa: BLE001 - not in Ray: pid only
        pass
    return [(kind, arm, s, {**cell, "runner": where}) for kind, arm, s, cell in side.new]


def actor_slots(resources: dict, num_gpus: float, num_cpus: float, seeds: int, max_actors: int | None) -> int:
    """How many engine actors to start at once: one per seed with work, at
    most ``max_actors``, and no more than the cluster can place at once.

    A Ray actor holds its GPUs (and CPUs) until it is killed, so an actor
    beyond the cluster's capacity stays pending forever while the actors
    that were placed wait for more seeds: with 4 seeds on 2 GPUs and one
    actor per seed, the gate hung on the H200 (results/gpu-h200-x2-*).

    Args:
        resources: ``ray.cluster_resources()`` (``{"GPU": 2.0, "CPU": 32.0, ...}``).
        num_gpus: GPUs per actor (0: CPU actors).
        num_cpus: CPUs per actor (0: no CPU cap).
        seeds: Seeds that have cells to run (>= 1).
        max_actors: The user's cap, or None.

    Returns:
        The number of actors, >= 1.

    Raises:
        spfcore.sweep.SweepError: the cluster cannot place even one actor.
    """
    from spfcore.sweep import SweepError

    n = seeds if max_actors is None else min(max_actors, seeds)
    for key, per in (("GPU", num_gpus), ("CPU", num_cpus)):
        if per > 0:
            fit = int(resources.get(key, 0) // per)
            if fit < 1:
                raise SweepError(f"the Ray cluster has {resources.get(key, 0):g} {key}(s); an engine actor needs {per:g}")
            n = min(n, fit)
    return max(1, n)


class EngineActor:
    """A Ray actor holding one engine slot (one GPU when ``num_gpus=1``):
    :meth:`run_seed` runs one seed's cells on an engine it starts and closes
    (``ray.remote(num_gpus=1)(EngineActor)``; see :class:`RayEngineCells`)."""

    def __init__(self, engine_factory=None) -> None:
        self.engine_factory = engine_factory

    def run_seed(self, *args) -> list[tuple]:
        """:func:`run_seed` in the actor's process."""
        return run_seed(*args, engine_factory=self.engine_factory)


@attrs.frozen
class RayEngineCells:
    """A drop-in for :func:`spfcore.run.pipeline.run_engine_cells`
    (``run_gate(..., engine_cells=RayEngineCells(...))``): the seeds' engine
    cells on Ray actors, one engine each, results put into the gate's sidecar
    as each seed finishes.

    Attributes:
        address: Ray address (``auto``, ``local``, ``host:6379``, ...; see
            :func:`spfcore.sweep.ray_connect`).
        num_gpus: GPUs per actor (1: one engine per GPU; 0 on CPU nodes).
        num_cpus: CPUs per actor.
        max_actors: Most actors at once (None: one per seed that has work).
        engine_factory: Passed to the actors (None: the real engine). It must
            be importable in the actors (a module-level function).
    """

    address: str = "auto"
    num_gpus: float = 1
    num_cpus: float = 1
    max_actors: int | None = None
    engine_factory: object = None

    def __call__(self, config, workloads, side, bar, engine_factory, num_blocks, deadline=None, broken=None,
                 again=None) -> None:
        """Run the engine cells not in ``side.done`` (the gate's signature;
        the gate's own ``engine_factory`` is ignored in favour of
        :attr:`engine_factory`, which runs in the actors). No seed starts
        after ``deadline`` (``time.monotonic()``); seeds running then finish.
        Only the first pass runs here: ``again`` (the gate's settling passes,
        ``--budget``) is not served on Ray, so a verdict that needs more
        passes stays INCONCLUSIVE.

        Raises:
            spfcore.sweep.SweepError: Ray missing or unreachable.
        """
        from spfcore.sweep import ray_connect

        ray_connect(self.address, None)
        import ray

        broken = dict(broken or {})
        work = []
        for k, seed in enumerate(config.seeds):
            done = {("engine", a, seed) for a in config.arms if ("engine", a, seed) in side.done}
            if len(done) < len(config.arms):
                work.append((k, seed, done))
        if not work:
            return
        n = actor_slots(ray.cluster_resources(), self.num_gpus, self.num_cpus, len(work), self.max_actors)
        actor_cls = ray.remote(num_gpus=self.num_gpus, num_cpus=self.num_cpus, max_restarts=0)(EngineActor)
        actors = [actor_cls.remote(self.engine_factory) for _ in range(n)]
        free, running = list(actors), {}
        try:
            while work or running:
                while work and free and (deadline is None or time.monotonic() < deadline):
                    k, seed, done = work.pop(0)
                    a = free.pop()
                    bar.set_description(f"engine seed {seed} on Ray")
                    ref = a.run_seed.remote(config, workloads[seed], seed, k, num_blocks, done, broken)
                    running[ref] = (a, seed)
                if not running:
                    break  # the deadline passed: the rest is left for a later run
                (ref,), _ = ray.wait(list(running), num_returns=1)
                a, seed = running.pop(ref)
                try:
                    results = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - the actor died: this seed's cells fail, others go on
                    from spfcore import report

                    results = [("engine", arm, seed, report.error_cell(arm, seed, exc)) for arm in config.arms
                               if ("engine", arm, seed) not in side.done]
                    # a fresh actor for the next seed; the failed one is killed first: it holds its
                    # GPU (CPU) until then, and a replacement beside it could never be placed (a hang)
                    ray.kill(a)
                    a = actor_cls.remote(self.engine_factory)
                    actors.append(a)
                for kind, arm, s, cell in results:
                    side.put(kind, arm, s, cell)
                    bar.update()
                free.append(a)
        finally:
            for a in actors + [a for a, _ in running.values()]:
                ray.kill(a)


def run_gate_on_ray(config, output, *, address: str = "auto", num_gpus: float = 1, num_cpus: float = 1,
                    max_actors: int | None = None, **kw) -> dict:
    """:func:`spfcore.run.pipeline.run_gate` with its engine cells on Ray
    (:class:`RayEngineCells`); ``kw`` as ``run_gate``'s."""
    from spfcore.run.pipeline import run_gate

    return run_gate(config, output, engine_cells=RayEngineCells(address, num_gpus, num_cpus, max_actors,
                                                                kw.pop("engine_factory", None)), **kw)
