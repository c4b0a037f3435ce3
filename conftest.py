"""Test-wide settings: hypothesis without per-example deadlines (these 2-core
machines are shared; a concurrent job moves timings 2-4x, and a deadline would
fail a correct test on timing alone)."""

from hypothesis import settings

settings.register_profile("spfcore", deadline=None)
settings.load_profile("spfcore")


def load_script(rel: str):
    """Import a script of the repository (e.g. ``benchmarks/bench_scale_cells.py``) as a module, by its path
    relative to the repository root (scripts are not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent / rel
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
