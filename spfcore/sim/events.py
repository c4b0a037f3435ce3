"""What a policy was shown, in a form that does not depend on the driver, and
where two such streams part.

:func:`spfcore.sim.replay.record_runtime_calls` records the calls a driver
(the engine adapter or the simulator) makes on a
:class:`~spfcore.runtime.PolicyRuntime`. :func:`events` turns one runtime's
calls into events that can be compared across drivers: a block is named by
where it was first stored, ``("prompt", request_id, depth)`` or ``("decode",
request_id, depth)``, not by its hash (the engine's keys are vLLM's block
hashes, the simulator's :func:`spfcore.keys.chain_keys`; they differ for the
same tokens), physical block ids beside them.
:func:`first_difference` finds where two streams part. Used by the CPU engine
test of ``tests/test_sim_calibrate.py`` and ``benchmarks/sim_engine_events.py``.
"""

from __future__ import annotations

from collections.abc import Sequence


def events(calls: Sequence[tuple]) -> list[tuple]:
    """One runtime's recorded calls (:meth:`spfcore.sim.replay.EventLog.of`)
    as driver-independent events, in call order.

    Returns:
        ``("arrived", request_id, arrival_index)``, ``("hit", request_id,
        labels, ids)``, ``("touch", ids)``, ``("stored", request_id,
        first_depth, labels, ids)``, ``("finished", request_id)``,
        ``("release", labels, ids, hashless_ids)``, ``("evict", n, labels,
        ids)``. A label names a block hash by its first store: ``("prompt",
        request_id, depth)`` for a prompt block, ``("decode", request_id,
        depth)`` for a decode block; ``None`` for a hashless block. The labels
        of ``hit``, ``release`` and ``evict`` are those the blocks held then.
        Keys are compared only for equality, so an adapter that handed the
        runtime consistently wrong keys would not show here (the adapter's
        own test checks that engine keys are vLLM's block hashes).
    """
    label: dict = {}  # block hash -> label, from its first store
    held: dict = {}  # physical id -> label of the hash it holds
    out = []
    for name, args, result in calls:
        if name == "arrived":
            out.append(("arrived", args[0].request_id, args[0].arrival_index))
        elif name == "hit":
            out.append(("hit", args[0].request_id, [held.get(i) for i in args[1]], list(args[1])))
        elif name == "touch":
            out.append(("touch", list(args[0])))
        elif name == "stored":
            req, ids, keys, first = args[:4]
            prompt = set(req.block_keys)
            labs = [label.setdefault(k, ("prompt" if k in prompt else "decode", req.request_id, d))
                    for d, k in enumerate(keys, first)]
            held.update(zip(ids, labs))
            out.append(("stored", req.request_id, first, labs, list(ids)))
        elif name == "finished":
            out.append(("finished", args[0].request_id))
        elif name == "release":
            out.append(("release", [held.get(i) for i in args[0]], list(args[0]), list(args[1])))
        elif name == "evict":
            ids = list(result or ())
            out.append(("evict", args[0], [held.pop(i, None) for i in ids], ids))
        elif name == "forget":
            for i in args[0]:
                held.pop(i, None)
    return out


def from_json(rows: Sequence) -> list[tuple]:
    """Events read back from JSON (:func:`events` written with ``json.dumps``):
    lists back to tuples where :func:`events` made tuples (events, labels).

    Recordings made before labels named blocks by their first store (before
    session 21: a prompt block's label was its hash, an int) are relabelled
    as :func:`events` labels them now: each int becomes ``("prompt",
    request_id, depth)`` of the ``stored`` event that first holds it.
    """
    old: dict = {}  # an int label of an old recording -> its label now

    def lab(x):
        if isinstance(x, list):
            return tuple(x)
        return old.get(x, x) if isinstance(x, int) else x

    out = []
    for e in rows:
        at = {"hit": 2, "evict": 2, "stored": 3, "release": 1}.get(e[0])
        if at is not None:
            if e[0] == "stored":
                for d, x in enumerate(e[3], e[2]):
                    if isinstance(x, int):
                        old.setdefault(x, ("prompt", e[1], d))
            e = e[:at] + [[lab(x) for x in e[at]]] + e[at + 1:]
        out.append(tuple(e))
    return out


def _short(x):
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:x}"[:6]
    if isinstance(x, (list, tuple)):
        return type(x)(_short(y) for y in x)
    return x


def first_difference(a: Sequence[tuple], b: Sequence[tuple], *, ids: bool = False, context: int = 6,
                     names: tuple[str, str] = ("engine", "sim")) -> str | None:
    """Where two event streams (:func:`events`) part, as text (``None`` if
    they are equal). Touches are left out (not a hook, and implied by the
    hit; the engine touches before the hit, the simulator after), and
    consecutive releases are merged (vLLM frees a request's hashless and
    cached blocks in two calls).

    Args:
        a, b: The two streams (e.g. engine and simulator).
        ids: Compare physical block ids too, ``a``'s mapped onto ``b``'s by
            their places in the first release (the whole free pool: an
            engine's free queue after a reset need not run ``1 .. n-1`` as
            the simulator's does); else labels only.
        context: Events shown before the first difference, and after it.
        names: What to call ``a`` and ``b`` in the text.
    """
    pos = {}
    if ids and a and b and a[0][0] == b[0][0] == "release":
        pos = dict(zip(a[0][3], b[0][3]))

    def norm(e, m):
        kind = e[0]
        if kind in ("hit", "stored", "evict"):
            return e[:-1] + ((m(e[-1]),) if ids else ())
        if kind == "release":
            return (kind, e[1]) + ((m(e[2]), m(e[3])) if ids else (len(e[3]),))
        return e

    def merged(stream, m):
        out = []
        for e in stream:
            if e[0] == "touch":
                continue
            e = norm(e, m)
            if out and e[0] == "release" == out[-1][0]:
                out[-1] = ("release",) + tuple(x + y for x, y in zip(out[-1][1:], e[1:]))
            else:
                out.append(e)
        return out

    na = merged(a, lambda xs: [pos.get(i, i) for i in xs])
    nb = merged(b, list)
    j = next((k for k, (x, y) in enumerate(zip(na, nb)) if x != y), min(len(na), len(nb)))
    if j == len(na) == len(nb):
        return None
    lines = [f"first difference at event {j} of {len(na)} ({names[0]}) / {len(nb)} ({names[1]}):"]
    lines += [f"  both  {_short(na[k])}" for k in range(max(0, j - context), j)]
    for k in range(j, min(j + context, max(len(na), len(nb)))):
        lines.append(f"  {names[0]:6s}{_short(na[k]) if k < len(na) else '-'}")
        lines.append(f"  {names[1]:6s}{_short(nb[k]) if k < len(nb) else '-'}")
    return "\n".join(lines)
