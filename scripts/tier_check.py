"""Does the CPU tier work with the installed vLLM? One tiered engine cell of 4 requests, checked
against the two-tier simulator request by request (issue 18; ``scripts/gpu_tiered.sh check``).

Two personas, one request each, then each again: the GPU cache holds one persona's prompt
(pressure 2), so the repeats continue their prefix from the CPU tier (vLLM's offloading
connector run by spfcore's ``SpfOffloadingSpec``, sequential, arm ``lru``). Prints vLLM's
version, which tier API the adapter found (``TIER_API``: ``handlers`` on vLLM 0.24, ``worker``
on 0.32), and per request the GPU hits and tier loads of engine and simulator, in tokens.

Exit status: 0 when the engine loads from the tier and agrees with the simulator on every
request (GPU hit tokens, tokens loaded from the tier, blocks stored in the tier); 1 otherwise;
2 when this vLLM has no usable CPU tier API (the reason is printed), or for a bad argument
(``--block-size`` < 1, a ``--model`` that is neither a preset nor a model folder).

    python scripts/tier_check.py                                   # vLLM's CPU build, tiny model
    python scripts/tier_check.py --model llama-3.2-3b --block-size 16   # on a GPU
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny", help="engine model preset or folder [tiny]")
    ap.add_argument("--block-size", type=_positive_int, default=None, help="tokens per block [32 on CPU, 16 on GPU]")
    args = ap.parse_args(argv)
    from spfcore.engine.presets import resolve_model

    try:  # before vLLM loads (seconds): a usage error, exit 2
        resolve_model(args.model)
    except ValueError as exc:
        ap.error(f"argument --model: {exc}")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    t0 = time.monotonic()
    import vllm

    from spfcore.engine import vllm_adapter as adapter
    from spfcore.engine.runner import EngineSpec, default_block_size, open_engine
    from spfcore.sim.tiered import simulate_tiered
    from spfcore.workloads.generators import make

    print(f"vllm {vllm.__version__}; tier API: {adapter.TIER_API or adapter.OFFLOAD_IMPORT_ERROR}", flush=True)
    if adapter.OFFLOAD_IMPORT_ERROR is not None:
        return 2
    bs = args.block_size or default_block_size()
    # 16-block prefixes, one-block queries: a request holds 18 blocks, the GPU cache 18 usable
    wl = make("personas", seed=42, personas=2, prefix_tokens=16 * bs, sessions=4, turns=1,
              query_tokens=bs, output_tokens=4)
    nb, cpu = 19, 40
    with open_engine(EngineSpec(model=args.model, block_size=bs, num_blocks=nb, cpu_blocks=cpu), "lru") as s:
        cell = s.run(wl, 42)
    sim = simulate_tiered(wl, "lru", num_blocks=nb, cpu_blocks=cpu, block_size=bs, per_request=True, promote=False)
    ok = cell["cpu_hit_tokens"] > 0 and cell["policy_faults"] == 0
    print(f"{'request':<12} {'engine gpu/tier':>16} {'sim gpu/tier':>14}")
    for e, m in zip(cell["requests"], sim["requests"]):
        same = (e["gpu_hit_tokens"], e["cpu_hit_tokens"]) == (m["gpu_hit_tokens"], m["cpu_hit_tokens"])
        ok &= same
        print(f"{e['request_id']:<12} {e['gpu_hit_tokens']:>7}/{e['cpu_hit_tokens']:<8} "
              f"{m['gpu_hit_tokens']:>6}/{m['cpu_hit_tokens']:<7} {'' if same else 'DIFFERS'}")
    ok &= len(cell["requests"]) == len(sim["requests"]) == 4
    ok &= cell["tier_stored_blocks"] == sim["tier_stored_blocks"]
    print(f"tier blocks stored: engine {cell['tier_stored_blocks']}, sim {sim['tier_stored_blocks']}; "
          f"policy faults {cell['policy_faults']}; {time.monotonic() - t0:.0f} s")
    print("tier check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
