"""Conformance kit: check any installed policy against the contract.

A pytest plugin (entry point ``pytest11`` named ``spfcore.conformance``)
and a set of plain check functions. Two ways to run it:

* ``pytest --spfcore-policy NAME`` (repeatable) runs :class:`TestConformance`
  on each named installed policy, and nothing else unless test paths are
  given too. Before spfcore's entry point is installed, add
  ``-p spfcore.conformance``.
* In a plugin's own tests, import the suite and name the policy with a
  fixture::

      from spfcore.conformance import TestConformance  # noqa: F401

      import pytest

      @pytest.fixture
      def spfcore_policy():
          return "my_policy"

  An optional fixture ``spfcore_policy_options`` (``{"key": "value"}``, as
  ``--policy-opt``) runs the suite on other parameters.

What is checked (one test each; every failure message names the policy, and
for a policy fault the hook and the event sequence that triggered it):

==================  =========================================================
test_loads          listed ``ok`` by the registry (imports, validates)
test_params         ``Params()`` builds; every field has a meaning in the
                    ``Attributes:`` section; each default survives the
                    string route of ``--policy-opt``
test_attributes     ``name``, ``capabilities``, ``Params``, ``contract``
                    (declared and compatible), docstrings; capabilities
                    match the hooks implemented
test_answers        for random event sequences (hypothesis) every answer has
                    the right shape (the runtime's own validation)
test_deterministic  equal decisions across runs and across
                    ``PYTHONHASHSEED`` values (two subprocesses)
test_pins           pins never wedge the pool: pinned free blocks stay under
                    the cap and a request needing the whole pool is served
test_bounded_state  the policy's memory (pympler ``asizeof``) stays bounded
                    on a long stream of fresh blocks
test_sim_matches    :class:`~spfcore.testing.MiniCache` and the simulator
                    (:func:`spfcore.sim.simulate`) give equal hits and
                    evictions on the same stream
test_hook_costs     the cost of each hook (calls, mean microseconds) is
                    reported (terminal summary, ``record_property``)
==================  =========================================================

A ``needs-future`` policy (Belady) is given the whole stream before it runs,
as the simulator does.

Loading this module has no side effect; its options have defaults, so the
plugin can be active in every pytest run.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import time
from collections.abc import Sequence

import pytest

#: One request of a stream: ``(session id or None, block keys)``. Keys are
#: strings, so the set order of a policy that iterates a set of keys follows
#: PYTHONHASHSEED (what the determinism check is for).
Prompt = tuple

#: Hooks whose presence implies a capability (hook -> capability).
_HOOK_CAPS = {"spfcore_admit_blocks": "admission", "spfcore_prefetch_hints": "prefetch",
              "spfcore_future_requests": "needs-future", "spfcore_score_blocks": "scoring"}

#: Costs measured by test_hook_costs in this session, for the terminal summary.
_COSTS: dict[str, dict] = {}


class ConformanceError(AssertionError):
    """A policy does not meet the contract; the message says what and where."""


# ---------------------------------------------------------------- streams


def _chain(symbols: Sequence[str]) -> tuple:
    """Chained keys of a prompt: key j names symbols 0..j (equal key <=> equal prefix)."""
    return tuple("/".join(symbols[: j + 1]) for j in range(len(symbols)))


def build_stream(steps: Sequence[tuple[int, int, int]], *, max_blocks: int = 6) -> list[Prompt]:
    """Prompts from abstract steps ``(session, system, new)``: ``session`` 0
    means a one-off request without a session, else the session's history
    grows by ``new`` blocks (restarting when it would exceed ``max_blocks``
    full blocks); every prompt starts with one of 3 shared system blocks.

    Returns:
        ``[(session id or None, keys), ...]`` in arrival order (keys: strings,
        chained, 1..max_blocks per prompt).
    """
    history: dict[int, list[str]] = {}
    out, fresh = [], 0
    for session, system, new in steps:
        if session == 0:
            syms = [f"sys{system % 3}"] + [f"x{(fresh := fresh + 1)}" for _ in range(max(new, 1))]
            out.append((None, _chain(syms[:max_blocks])))
            continue
        h = history.get(session)
        if h is None or len(h) + new > max_blocks:
            h = history[session] = [f"sys{system % 3}"]
        h.extend(f"x{(fresh := fresh + 1)}" for _ in range(new))
        out.append((f"s{session}", _chain(h)))
    return out


def random_stream(seed: int, n: int, *, sessions: int = 8, max_blocks: int = 6,
                  fresh_sessions: bool = False) -> list[Prompt]:
    """``n`` prompts from :func:`build_stream` with steps drawn by
    ``random.Random(seed)``. ``fresh_sessions``: session ids keep changing
    (session ``k`` lives for about 4 requests), so a policy's per-session
    and per-block state meets new names all the time."""
    rng = random.Random(seed)
    steps = []
    for i in range(n):
        s = rng.randrange(sessions + 1)
        if fresh_sessions and s:
            s += sessions * (i // (4 * sessions))
        steps.append((s, rng.randrange(3), rng.randrange(4)))
    return build_stream(steps, max_blocks=max_blocks)


def mini_cache(name: str, num_blocks: int, stream: Sequence[Prompt], options=None, *, block_size: int = 4,
               runtime=None):
    """A :class:`~spfcore.testing.MiniCache` running policy ``name``, with
    ``stream`` handed over first when the policy declares ``needs-future``."""
    from spfcore.runtime import PolicyRuntime
    from spfcore.testing import MiniCache

    rt = runtime or PolicyRuntime.for_policy(name, num_blocks, block_size, options)
    c = MiniCache(rt, num_blocks, transactional=False)  # a failure ends the check: no undo copies needed
    if rt.needs_future:
        c.set_future(stream)
    return c


def serve_stream(c, stream: Sequence[Prompt], name: str, after=None) -> None:
    """Serve every prompt; a policy fault becomes a :class:`ConformanceError`
    naming the request (index, session, keys). ``after(i, cache)`` runs after
    each request."""
    from spfcore.runtime import PolicyError

    for i, (session, keys) in enumerate(stream):
        try:
            c.serve(keys, session)
        except PolicyError as exc:
            raise ConformanceError(f"policy {name!r}, request {i} of {len(stream)} (session {session!r}, "
                                   f"{len(keys)} blocks {list(keys)!r}): {exc}") from exc
        if after is not None:
            after(i, c)


def decisions(name: str, options=None, *, seed: int = 7, n: int = 300, num_blocks: int = 10) -> dict:
    """The policy's decisions on a fixed random stream: keys evicted, in
    order, and blocks hit per request (JSON-able)."""
    stream = random_stream(seed, n)
    c = mini_cache(name, num_blocks, stream, options)
    serve_stream(c, stream, name)
    return {"evicted": list(c.evicted), "hits": list(c.hits)}


def _env_for_child(hash_seed: int) -> dict:
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = str(hash_seed)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


# ----------------------------------------------------------------- checks


def check_loads(name: str):
    """The installed policy ``name`` is listed ``ok``; returns its
    :class:`~spfcore.registry.PolicyInfo`.

    Raises:
        ConformanceError: not installed, not allowed, or listed with an error.
    """
    from spfcore import registry

    infos = registry.by_name()
    if name not in infos:
        avail = ", ".join(sorted(infos)) or "none"
        raise ConformanceError(f"policy {name!r} is not installed (entry-point group {registry.GROUP}) "
                               f"or not allowed by SPFCORE_POLICIES (installed: {avail})")
    info = infos[name]
    if info.status != "ok":
        raise ConformanceError(f"policy {name!r} ({info.distribution} {info.version}, {info.entry_point}) "
                               f"does not load: {info.status}")
    return info


def check_params(name: str) -> None:
    """``Params()`` builds with its defaults; every field has a meaning in
    the ``Attributes:`` section of the Params docstring; every default, given
    back as a string (as ``--policy-opt NAME.KEY=VALUE`` would), is accepted.

    Raises:
        ConformanceError: listing each offending field.
    """
    from spfcore import registry

    info = check_loads(name)
    params = info.cls.Params
    problems = []
    if not (params.__doc__ or "").strip():
        problems.append(f"{params.__name__} has no docstring")
    undocumented = [p["name"] for p in info.parameters if not p["doc"]]
    if undocumented:
        problems.append(f"field(s) {', '.join(undocumented)} have no meaning: add them to an 'Attributes:' "
                        f"section of the {params.__name__} docstring (name: meaning, with units)")
    for p in info.parameters:
        raw = "none" if p["default"] is None else str(p["default"])
        try:
            registry.make_params(info, {p["name"]: raw})
        except registry.PolicyConfigError as exc:
            problems.append(f"the default of {p['name']!r} given as --policy-opt {name}.{p['name']}={raw} "
                            f"is refused: {exc}")
    if problems:
        raise ConformanceError(f"policy {name!r}: " + "; ".join(problems))


def check_attributes(name: str, options=None) -> None:
    """Required attributes are present and consistent: ``name`` a lowercase
    identifier equal to the entry point; ``contract`` declared and
    compatible with this core; class docstring; ``instance.params`` is the
    Params given; the capabilities match the hooks (admission, prefetch,
    needs-future, scoring).

    Raises:
        ConformanceError: listing each problem.
    """
    import re

    from spfcore import contract, registry

    info = check_loads(name)
    cls, problems = info.cls, []
    if not re.fullmatch(r"[a-z][a-z0-9_]*", cls.name):
        problems.append(f"name {cls.name!r} is not a lowercase identifier")
    declared = getattr(cls, "contract", None)
    if declared is None:
        problems.append(f"declares no contract version: add the class attribute contract = "
                        f"\"{'.'.join(contract.CONTRACT_VERSION.split('.')[:2])}\"")
    elif contract.incompatibility(declared):
        problems.append(contract.incompatibility(declared))
    if not (cls.__doc__ or "").strip():
        problems.append("the policy class has no docstring (describe and list-policies show it)")
    params = registry.make_params(info, options)
    _, inst = registry.plugin_manager(info, options)
    if getattr(inst, "params", None) != params:
        problems.append("instance.params is not the Params instance given to __init__")
    caps = set(getattr(inst, "capabilities", cls.capabilities))
    hooks = set(info.hooks)
    for hook, cap in _HOOK_CAPS.items():
        if hook in hooks and cap not in caps:
            problems.append(f"implements {hook} but does not declare capability {cap!r}")
    if "needs-future" in caps and "spfcore_future_requests" not in hooks:
        problems.append("declares 'needs-future' but implements no spfcore_future_requests")
    if problems:
        raise ConformanceError(f"policy {name!r}: " + "; ".join(problems))


def check_answers(name: str, options=None, *, examples: int = 25) -> None:
    """For random event sequences (hypothesis: sessions that come back,
    shared system blocks, one-off requests, growing histories; a pool of 10
    blocks of 4 tokens) every hook answer has the right shape: the runtime's
    validation (:func:`spfcore.runtime.score_columns` and the like) accepts
    it and no hook raises.

    Raises:
        ConformanceError: the first failing sequence (shrunk by hypothesis),
            the request, the hook and the answer.
    """
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    check_loads(name)
    steps = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2), st.integers(0, 3)), min_size=1, max_size=40)

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(steps)
    def run(s):
        stream = build_stream(s)
        serve_stream(mini_cache(name, 10, stream, options), stream, name)

    run()


def check_deterministic(name: str, options=None) -> dict:
    """Equal decisions (evicted keys in order, hits per request) on one fixed
    stream: twice in this process and in two subprocesses with
    ``PYTHONHASHSEED`` 1 and 2 (string keys: set and dict order of strings
    follows the hash seed).

    Returns:
        The decisions of this process.

    Raises:
        ConformanceError: naming the runs that differ and the first difference.
    """
    check_loads(name)
    first = decisions(name, options)
    if decisions(name, options) != first:
        raise ConformanceError(f"policy {name!r}: two runs of the same stream in one process decide "
                               "differently (does it read a clock, a random source or object ids?)")
    code = ("import json, sys; from spfcore.conformance import decisions; "
            "print(json.dumps(decisions(sys.argv[1], json.loads(sys.argv[2]))))")
    procs = {seed: subprocess.Popen([sys.executable, "-c", code, name, json.dumps(options or {})],
                                    env=_env_for_child(seed), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
             for seed in (1, 2)}
    for seed, p in procs.items():
        out, err = p.communicate(timeout=600)
        if p.returncode:
            raise ConformanceError(f"policy {name!r}: the run with PYTHONHASHSEED={seed} failed:\n{err[-2000:]}")
        got = json.loads(out)
        if got != first:
            raise ConformanceError(f"policy {name!r}: decisions differ with PYTHONHASHSEED={seed}: "
                                   f"{_first_difference(first, got)} (iterating a set of keys? keep insertion "
                                   "order with a dict, or sort)")
    return first


def _first_difference(a: dict, b: dict) -> str:
    for field in ("hits", "evicted"):
        x, y = a[field], b[field]
        for j, (u, v) in enumerate(zip(x, y)):
            if u != v:
                return f"{field}[{j}] is {u!r} in this process, {v!r} there"
        if len(x) != len(y):
            return f"{len(x)} {field} here, {len(y)} there"
    return "no difference"


def check_pins(name: str, options=None, *, num_blocks: int = 12, n: int = 400) -> None:
    """Pins never wedge the pool: on a session-heavy random stream, pinned
    free blocks never exceed the evictor's cap (``pin_cap_fraction`` of the
    pool; with ``pin_cap_fraction = 1`` as well, when Params has it), and a
    request of fresh blocks filling the whole pool is served afterwards.

    Raises:
        ConformanceError: the request after which the cap was exceeded, or
            the refused full-pool request.
    """
    from spfcore import registry

    info = check_loads(name)
    runs = [dict(options or {})]
    if any(p["name"] == "pin_cap_fraction" for p in info.parameters):
        runs.append({**runs[0], "pin_cap_fraction": "1.0"})
    for opts in runs:
        stream = random_stream(11, n, sessions=4)
        big = (None, _chain([f"big{j}" for j in range(num_blocks - 1)]))
        c = mini_cache(name, num_blocks, [*stream, big], opts)
        cap = c.rt.pin_cap

        def after(i, c, cap=cap, opts=opts):
            pinned = c.rt.num_pinned
            if pinned > cap:
                raise ConformanceError(f"policy {name!r} ({opts or 'defaults'}): {pinned} pinned free blocks "
                                       f"after request {i}, over the cap of {cap}")

        serve_stream(c, stream, name, after)
        try:
            serve_stream(c, [big], name)
        except (ValueError, ConformanceError) as exc:
            raise ConformanceError(f"policy {name!r} ({opts or 'defaults'}): after {n} requests a request of "
                                   f"{num_blocks} blocks (the whole pool) was refused: {exc}") from exc
        if not set(big[1]) <= c.cached():
            raise ConformanceError(f"policy {name!r}: the full-pool request's blocks are not all cached")
        registry.get(name)  # still listed ok after the run


def check_bounded_state(name: str, options=None, *, num_blocks: int = 10, n: int = 3000,
                        slack_bytes: int = 64 * 1024, growth: float = 1.5) -> dict:
    """The policy's memory stays bounded by the cache, not by the stream: on
    ``n`` requests whose blocks and sessions keep changing, the deep size of
    the policy object (pympler ``asizeof``; for a ``needs-future`` policy,
    measured after the future was handed over) at the end is at most
    ``growth`` times its size after ``n // 3`` requests plus ``slack_bytes``.

    Returns:
        ``{"bytes_at_third": ..., "bytes_at_end": ...}``.

    Raises:
        ConformanceError: the sizes, when the state grew with the stream.
    """
    from pympler.asizeof import asizeof

    check_loads(name)
    stream = random_stream(5, n, fresh_sessions=True)
    c = mini_cache(name, num_blocks, stream, options)
    policy = c.rt.pm.get_plugin(name)
    sizes = {}

    def after(i, c):
        if i + 1 in (n // 3, n):
            sizes["bytes_at_third" if i + 1 == n // 3 else "bytes_at_end"] = asizeof(policy)

    serve_stream(c, stream, name, after)
    a, b = sizes["bytes_at_third"], sizes["bytes_at_end"]
    if b > growth * a + slack_bytes:
        raise ConformanceError(f"policy {name!r}: state grew with the stream: {a:,} bytes after {n // 3} "
                               f"requests, {b:,} after {n} on a {num_blocks}-block pool (bound it by the cache: "
                               "forget evicted blocks and inactive sessions, or cap a history)")
    return sizes


def check_sim_matches_minicache(name: str, options=None, *, num_blocks: int = 10, n: int = 250,
                                block_size: int = 4) -> None:
    """MiniCache and the simulator decide identically: the same random
    stream, as token ids through :func:`spfcore.sim.simulate` (sequential,
    ``num_blocks`` with vLLM's null block) and as the simulator's own block
    keys through a MiniCache of the same size with block 0 held, gives equal
    hits on every request and equal eviction counts.

    Raises:
        ConformanceError: the first request whose hits differ.
    """
    from spfcore.runtime import PolicyRuntime
    from spfcore.sim import prepare, simulate
    from spfcore.workloads.model import Request, Workload

    check_loads(name)
    stream = random_stream(3, n)
    ids: dict[str, int] = {}
    reqs = []
    for i, (session, keys) in enumerate(stream):
        toks = []
        for k in keys:
            sym = ids.setdefault(k.rsplit("/", 1)[-1], len(ids))
            toks.extend(1000 + block_size * sym + j for j in range(block_size))
        reqs.append(Request(f"r{i}", float(i), toks + [7], 1, session_id=session))
    wl = Workload("conformance", {}, reqs)
    prep = prepare(wl, block_size)
    sim = simulate(prep, name, num_blocks=num_blocks, block_size=block_size, options=options)
    rt = PolicyRuntime.for_policy(name, num_blocks, block_size, options)
    keyed = [(s, v.block_keys) for (s, _), v in zip(stream, prep.views)]
    c = mini_cache(name, num_blocks, keyed, runtime=rt)
    rt.touch((0,))  # MiniCache freed blocks 0..n-1: hold block 0 as vLLM's null block, as the simulator does
    serve_stream(c, keyed, name)
    sim_hits = [r["cached_tokens"] // block_size for r in sim["requests"]]
    for i, (a, b) in enumerate(zip(sim_hits, c.hits)):
        if a != b:
            raise ConformanceError(f"policy {name!r}: request {i} hits {a} blocks in the simulator and {b} in "
                                   "MiniCache (does the policy read block ids, wall time or hidden state?)")
    if sim["evictions"] != len(c.evicted):
        raise ConformanceError(f"policy {name!r}: {sim['evictions']} evictions in the simulator, "
                               f"{len(c.evicted)} in MiniCache")


def hook_costs(name: str, options=None, *, num_blocks: int = 64, n: int = 600) -> dict:
    """Cost of each hook on a random stream (pool ``num_blocks``): per hook
    ``calls`` and ``mean_us`` (wall microseconds per call, through pluggy's
    hook-call monitoring), plus ``policy_us_per_request`` (every runtime
    event, evictor bookkeeping included; see ``PolicyRuntime.stats``).
    A report, not a verdict: this machine's timings are noisy."""
    from spfcore.runtime import PolicyRuntime

    check_loads(name)
    rt = PolicyRuntime.for_policy(name, num_blocks, 4, options)
    started: list[float] = []
    acc: dict[str, list] = {}

    def before(hook_name, impls, kwargs):
        started.append(time.perf_counter())

    def after(outcome, hook_name, impls, kwargs):
        dt = time.perf_counter() - started.pop()
        if impls:
            a = acc.setdefault(hook_name, [0, 0.0])
            a[0] += 1
            a[1] += dt

    undo = rt.pm.add_hookcall_monitoring(before, after)
    try:
        stream = random_stream(13, n, max_blocks=12)
        serve_stream(mini_cache(name, num_blocks, stream, runtime=rt), stream, name)
    finally:
        undo()
    out = {h: {"calls": c, "mean_us": round(s / c * 1e6, 2)} for h, (c, s) in sorted(acc.items())}
    return {"hooks": out, "policy_us_per_request": round(rt.policy_seconds / n * 1e6, 2)}


# ------------------------------------------------------------------ the suite


def _options(request) -> dict | None:
    try:
        return request.getfixturevalue("spfcore_policy_options")
    except pytest.FixtureLookupError:
        return None


def _examples(request) -> int:
    try:
        return int(request.config.getoption("spfcore_examples"))
    except ValueError:  # the plugin's options are not registered (-p not given)
        return 25


class TestConformance:
    """The contract, one test per check; needs a fixture ``spfcore_policy``
    (the policy name) and optionally ``spfcore_policy_options``."""

    def test_loads(self, spfcore_policy):
        check_loads(spfcore_policy)

    def test_params(self, spfcore_policy):
        check_params(spfcore_policy)

    def test_attributes(self, spfcore_policy, request):
        check_attributes(spfcore_policy, _options(request))

    def test_answers(self, spfcore_policy, request):
        check_answers(spfcore_policy, _options(request), examples=_examples(request))

    def test_deterministic(self, spfcore_policy, request):
        check_deterministic(spfcore_policy, _options(request))

    def test_pins(self, spfcore_policy, request):
        check_pins(spfcore_policy, _options(request))

    def test_bounded_state(self, spfcore_policy, request, record_property):
        record_property("state_bytes", check_bounded_state(spfcore_policy, _options(request)))

    def test_sim_matches_minicache(self, spfcore_policy, request):
        check_sim_matches_minicache(spfcore_policy, _options(request))

    def test_hook_costs(self, spfcore_policy, request, record_property):
        costs = hook_costs(spfcore_policy, _options(request))
        _COSTS[spfcore_policy] = costs
        record_property("hook_costs", costs)
        assert all(math.isfinite(h["mean_us"]) and h["calls"] > 0 for h in costs["hooks"].values())


# ----------------------------------------------------------- pytest plugin


def pytest_addoption(parser):
    group = parser.getgroup("spfcore", "spfcore policy conformance kit")
    group.addoption("--spfcore-policy", action="append", default=[], metavar="NAME",
                    help="Check the installed spfcore policy NAME against the contract (repeatable). "
                         "Without test paths only the conformance suite runs.")
    group.addoption("--spfcore-examples", default="25", metavar="N",
                    help="Hypothesis examples of the conformance kit's random event sequences (default 25).")


def pytest_configure(config):
    names = config.getoption("spfcore_policy", default=None)
    if not names:
        return
    suite = os.path.join(os.path.dirname(__file__), "conformance_suite.py")
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        config.args.append(suite)
    else:  # no paths given: the suite alone, not the project's own tests
        config.args[:] = [suite]


def pytest_generate_tests(metafunc):
    if "spfcore_policy" not in metafunc.fixturenames or not getattr(metafunc.module, "SPFCORE_CONFORMANCE_SUITE",
                                                                    False):
        return
    names = metafunc.config.getoption("spfcore_policy", default=None) or []
    metafunc.parametrize("spfcore_policy", list(dict.fromkeys(names)), scope="module")


def pytest_terminal_summary(terminalreporter):
    if not _COSTS:
        return
    tr = terminalreporter
    tr.section("spfcore hook costs (MiniCache, 64 blocks; mean wall us per call)")
    for name, costs in _COSTS.items():
        hooks = ", ".join(f"{h.removeprefix('spfcore_')} {c['mean_us']:.1f} x{c['calls']}"
                          for h, c in costs["hooks"].items()) or "no hooks (vLLM order)"
        tr.write_line(f"{name}: {costs['policy_us_per_request']:.1f} us/request in spfcore; {hooks}")


__all__ = ["ConformanceError", "TestConformance", "build_stream", "random_stream", "check_loads", "check_params",
           "check_attributes", "check_answers", "check_deterministic", "check_pins", "check_bounded_state",
           "check_sim_matches_minicache", "hook_costs", "decisions", "mini_cache", "serve_stream"]
