"""Long runs: is every shipped policy's state bounded? ``--events`` (default
1,000,000) random runtime events (arrivals, hits, stores, evictions,
finishes, releases) through :class:`spfcore.runtime.PolicyRuntime` per
policy, on a fixed cache, with a stream whose keys and sessions never repeat
after they age out (new conversations keep arriving, old ones end, a few
shared system prompts), so any per-key or per-session structure that is not
capped grows with the run. At 10k, 100k and 1M events it prints the policy
object's deep size (``pympler.asizeof``, bytes) and the length of each of its
container attributes, and the runtime's own per-key maps (``by_key``, hints).

The driver is a plain block pool: ref counts, a key -> block map, prefix
lookup, hashless blocks (the partial last block) released as hashless,
finished requests' blocks released deepest first; at most ``--running``
requests hold blocks. ``belady_oracle`` gets the whole future stream first
(``set_future``): its index is linear in the run by nature.

    .venv/bin/python benchmarks/bench_long_run.py [--events 1000000] [--policies lru,frequency]
        [--num-blocks 1024] [--seed 0]

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import time
from collections import deque

import numpy as np
from pympler import asizeof

from spfcore import registry
from spfcore.runtime import PolicyRuntime
from spfcore.views import RequestView

POLICIES = ("lru", "session_ttl", "frequency", "spf_expected_utility", "belady_oracle")
BS = 16
SYSTEM_PROMPTS, SYSTEM_BLOCKS, ACTIVE, MAX_BLOCKS = 32, 4, 200, 24


def requests(seed: int):
    """Endless deterministic request stream: ``RequestView`` with chained
    unique int keys; 30% start a conversation on one of 32 system prompts
    (Zipf), 70% continue one of the 200 most recent (1-3 new blocks);
    conversations end at 24 blocks. Yields (view, partial_tokens)."""
    rng = np.random.default_rng(seed)
    active: dict[str, list] = {}
    order: deque = deque()
    nxt, n_sess, i = 10**6, 0, 0
    while True:
        if not active or rng.random() < 0.3:
            s = min(int(rng.zipf(1.3)) - 1, SYSTEM_PROMPTS - 1)
            sid = f"s{n_sess}"
            n_sess += 1
            keys = [s * 100 + d for d in range(SYSTEM_BLOCKS)]
            active[sid] = keys
            order.append(sid)
            while len(order) > ACTIVE:
                active.pop(order.popleft(), None)
        else:
            sid = order[int(rng.integers(len(order)))]
            keys = active[sid]
        k = int(rng.integers(1, 4))
        keys.extend(range(nxt, nxt + k))
        nxt += k
        part = int(rng.integers(0, BS))
        yield RequestView(f"r{i}", sid, i, float(i), len(keys) * BS + part, tuple(keys)), part
        i += 1
        if len(keys) >= MAX_BLOCKS:
            active.pop(sid, None)
            order.remove(sid)


def _future(seed: int, n: int):
    for (view, _), _i in zip(requests(seed), range(n)):
        yield view


def _lens(obj, prefix: str = "", depth: int = 0) -> dict:
    """Lengths of the container attributes of ``obj`` and, one level down, of the objects it holds."""
    out = {}
    for k, v in vars(obj).items():
        if isinstance(v, (str, bytes, frozenset)):
            continue
        if hasattr(v, "__len__"):
            out[prefix + k] = len(v)
        elif depth == 0 and hasattr(v, "__dict__") and not callable(v):
            out.update(_lens(v, f"{k}.", 1))
    return out


def _state(policy, rt) -> dict:
    lens = _lens(policy)
    return {"bytes": asizeof.asizeof(policy), "lens": lens, "by_key": len(rt.by_key), "hints": len(rt._hints)}


def run(name: str, events: int, num_blocks: int, seed: int, running: int, marks) -> list:
    info = registry.get(name)
    pm, policy = registry.plugin_manager(info, None)
    rt = PolicyRuntime(pm, num_blocks, BS, policy_name=name, needs_future="needs-future" in info.capabilities,
                       pin_cap_fraction=getattr(policy.params, "pin_cap_fraction", 0.5))
    if rt.needs_future:
        rt.set_future(_future(seed, events))  # >= the requests this run can reach (>= 1 event each)
    rt.release([], range(1, num_blocks), 0.0)  # block 0 is vLLM's null block
    ref = [0] * num_blocks
    block_of: dict[int, int] = {}  # key -> block holding it
    key_of: list = [None] * num_blocks
    held: deque = deque()  # (view, blocks in depth order, number of hashed blocks)
    n, out, marks = 0, [], list(marks)
    t0 = time.perf_counter()

    def finish():
        nonlocal n
        view, blocks, nh = held.popleft()
        rt.finished(view, now)
        cached, hashless = [], []
        for b in reversed(blocks):
            ref[b] -= 1
            if ref[b] == 0:
                (cached if key_of[b] is not None else hashless).append(b)
        rt.release(cached, hashless, now)
        n += 2

    for view, part in requests(seed):
        now = float(view.arrival_index)
        rt.arrived(view, now)
        n += 1
        hits = []
        for k in view.block_keys:
            b = block_of.get(k)
            if b is None:
                break
            hits.append(b)
        need = len(view.block_keys) - len(hits) + (1 if part else 0)
        while held and need + sum(1 for b in hits if ref[b] == 0) > rt.num_free:
            finish()
        if held and len(held) >= running:
            finish()
        for b in hits:
            if ref[b] == 0:
                rt.touch((b,))
            ref[b] += 1
        rt.hit(view, hits, now)
        new = rt.evict(need, now) if need else []
        for b in new:
            k = key_of[b]
            if k is not None:
                key_of[b] = None
                if block_of.get(k) == b:
                    del block_of[k]
            ref[b] = 1
        first = len(hits)
        full = new[:len(view.block_keys) - first]
        keys = view.block_keys[first:]
        for b, k in zip(full, keys):
            key_of[b] = k
            block_of[k] = b
        if full:
            rt.stored(view, full, keys, first, view.block_keys[first - 1] if first else None, BS, now)
        n += 3
        held.append((view, hits + new, len(full)))
        while marks and n >= marks[0]:
            st = _state(policy, rt)
            st.update(events=n, requests=view.arrival_index + 1, wall=time.perf_counter() - t0)
            out.append(st)
            print(f"  {name} {marks.pop(0):>9,}: {st['bytes']:>12,} B  by_key {st['by_key']:,}  "
                  f"hints {st['hints']:,}  {st['lens']}  ({st['wall']:.0f}s)", flush=True)
        if not marks:
            return out
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--num-blocks", type=int, default=1024)
    ap.add_argument("--running", type=int, default=4, help="most requests holding blocks at once")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    marks = [m for m in (10_000, 100_000, 1_000_000) if m < a.events] + [a.events]
    rows = {p: run(p, a.events, a.num_blocks, a.seed, a.running, marks) for p in a.policies.split(",")}
    print(f"\npolicy state, bytes (pympler asizeof of the policy object); cache {a.num_blocks} blocks of {BS} tokens")
    print(f"{'policy':<22}" + "".join(f"{m:>14,}" for m in marks) + f"{'last/first':>12}{'wall s':>9}")
    for p, r in rows.items():
        print(f"{p:<22}" + "".join(f"{x['bytes']:>14,}" for x in r)
              + f"{r[-1]['bytes'] / r[0]['bytes']:>12.2f}{r[-1]['wall']:>9.0f}")


if __name__ == "__main__":
    main()
