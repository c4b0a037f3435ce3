"""One run pipeline for every command that runs arms x seeds: the run spec
(:mod:`~spfcore.run.spec`: workload, cache, arms, seeds, options; each seed
prepared once), the plan (:mod:`~spfcore.run.plan`: which cells, in which
order), the cell (:mod:`~spfcore.run.cell`), the store
(:mod:`~spfcore.run.store`: sidecar, resume, merge, wall time), the
provenance in its fingerprint (:mod:`~spfcore.run.provenance`: device,
versions, code digest) and the orchestration (:mod:`~spfcore.run.pipeline`:
simulator, ceilings, engine, verdict, results files)."""
