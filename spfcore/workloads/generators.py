"""Deterministic workload generators.

Every generator is a pure function of its flags and ``seed``: it draws from
``numpy.random.default_rng([seed, stream])`` only (never ``hash()`` or global
state), so the same seed and flags give identical requests in any process.
Token ids lie in ``[3, vocab)`` (ids 0..2 are left to special tokens).

Generators (flags and defaults in :data:`GENERATORS`; common flags in
:data:`COMMON_FLAGS`):

* ``personas`` - the SPF seed workload: ``personas`` shared prefixes of
  ``prefix_tokens`` tokens, ``sessions`` sessions of ``turns`` turns; session
  ``s`` uses persona ``s mod personas``; every prompt is the persona prefix +
  a fresh ``query_tokens`` query (turns do not accumulate). ``order``:
  ``round_robin`` (turn by turn, sessions 0..S-1) or ``shuffled`` (a random
  interleaving that keeps each session's turns in order).
* ``zipf`` - like ``personas``, but session ``s`` draws its persona from a
  Zipf law over personas (probability of rank ``r`` (1-based) proportional to
  ``r**-alpha``), so a few personas are hot.
* ``bursty`` - like ``personas``, but a session's turns come back to back
  (session-major order); with a timed arrival process bursts start at the
  arrival process's times and turns inside a burst are ``turn_gap_s`` apart.
* ``revisit`` - ``sessions`` sessions, each with its own ``prefix_tokens``
  context; between two turns of a session come ``gap_requests`` one-off
  requests of ``noise_tokens`` fresh tokens (the other traffic).
* ``multiturn`` - growing history: turn 0 is persona prefix + query, turn
  ``t`` is the previous prompt + the previous output + a new query. Output
  tokens are drawn by the workload (``Request.output_token_ids``).

* ``agents`` - multi-turn tool-using agents: every prompt starts with one
  ``system_tokens`` system prompt (shared by all) and the tool manifest of the
  agent's type (``agent_types`` manifests of ``manifest_tokens``, type drawn
  by a Zipf law of exponent ``alpha``), then the agent's task; step ``t`` is
  the previous prompt + the previous tool call (``output_tokens``, drawn by
  the workload) + the tool's result (``result_tokens`` fresh tokens).
  ``sessions`` agents of 2..2*``steps``-1 steps run interleaved (random order
  that keeps each agent's steps in order).
* ``rag`` - retrieval-augmented prompts: a ``system_tokens`` system prompt,
  then ``k`` distinct documents of ``doc_tokens`` from a corpus of ``docs``
  (popularity Zipf ``alpha``), then a fresh question. ``doc_order``:
  ``ranked`` (documents sorted by corpus rank, so requests sharing their
  most popular documents share a prefix) or ``retrieved`` (in draw order:
  only the first document's prefix is shared). A retrieval is followed by
  up to ``followups`` follow-up questions on the same documents (each next
  one with probability ``followup_p``), later in the stream; conversations
  are interleaved at random.
* ``scan`` - a hot working set under scans: ``hot`` prefixes of
  ``prefix_tokens`` (popularity Zipf ``alpha``) + fresh query, and every
  ``scan_every`` such requests a scan of ``scan_length`` one-off prompts of
  ``scan_tokens`` fresh tokens (a batch job: never reused).
* ``mix`` - production-like mixture of the shapes above: chat (``multiturn``
  sessions, shuffled), ``agents``, ``rag`` and one-off prompts, sized by
  ``chat_sessions``, ``agent_sessions``, ``rag_requests``, ``oneoff_requests``,
  interleaved at random (each stream keeps its own order; request ids are
  prefixed by the stream).

Arrival processes (flag ``arrival``): ``sequential`` (every ``arrival_s`` is
0; sequential runners ignore it), ``rate`` (request ``i`` at ``i / rate``
seconds), ``poisson`` (exponential gaps of mean ``1 / rate`` seconds).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import attrs
import numpy as np

from spfcore.workloads.model import Request, Workload

#: First usable token id (0..2 are special ids).
MIN_TOKEN = 3


@attrs.frozen
class Flag:
    """One generator flag: name, Python type, default, help text, for string
    flags the allowed values, and for numbers the allowed range: ``>= low``
    (``> low`` with ``low_open``) and ``<= high`` (no bound: ``None``);
    floats must also be finite."""

    name: str
    type: type
    default: object
    help: str
    choices: tuple | None = None
    low: float = 0
    high: float | None = None
    low_open: bool = False

    def allowed(self) -> str:
        """The range as text: ``>= 0``, ``> 0``, ``in [0, 1]``."""
        if self.high is not None:
            return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"
        return f"{'>' if self.low_open else '>='} {self.low:g}"

    def convert(self, raw):
        """Convert a CLI string (or a Python value) to this flag's type.

        Raises:
            ValueError: naming the flag and what is allowed (a value out of
                range; NaN or infinite for a float).
        """
        try:
            value = self.type(raw)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"flag {self.name!r}: bad value {raw!r} (must be of type {self.type.__name__})") from None
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"flag {self.name!r}: bad value {raw!r} (must be one of {list(self.choices)})")
        if self.type in (int, float):
            if self.type is float and not math.isfinite(value):
                raise ValueError(f"flag {self.name!r}: must be a finite number {self.allowed()}, got {raw!r}")
            if (value < self.low or (self.low_open and value == self.low)
                    or (self.high is not None and value > self.high)):
                raise ValueError(f"flag {self.name!r}: must be {self.allowed()}, got {raw!r}")
        return value


@attrs.frozen
class Generator:
    """A registered generator: ``fn(rng, **flags) -> list[Request]`` plus its
    own flags (the common flags are added by :func:`make`)."""

    name: str
    fn: Callable
    flags: tuple
    doc: str

    def all_flags(self) -> dict[str, Flag]:
        """Own flags then common flags, by name."""
        return {f.name: f for f in (*self.flags, *COMMON_FLAGS)}


COMMON_FLAGS = (
    Flag("vocab", int, 32000, "token ids are drawn from [3, vocab)", low=MIN_TOKEN + 1),
    Flag("arrival", str, "sequential", "arrival process", ("sequential", "rate", "poisson")),
    Flag("rate", float, 1.0, "requests per second for arrival=rate|poisson", low_open=True),
)

_PERSONA_FLAGS = (
    Flag("personas", int, 16, "number of shared prefixes (personas)", low=1),
    Flag("prefix_tokens", int, 8192, "tokens per persona prefix"),
    Flag("sessions", int, 32, "number of sessions"),
    Flag("turns", int, 4, "turns (requests) per session"),
    Flag("query_tokens", int, 128, "fresh query tokens per prompt"),
    Flag("output_tokens", int, 32, "tokens to generate per request", low=1),
)
_ORDER = Flag("order", str, "round_robin", "request order", ("round_robin", "shuffled"))


def _tokens(rng: np.random.Generator, n: int, vocab: int) -> tuple:
    return tuple(rng.integers(MIN_TOKEN, vocab, size=n).tolist())


def _order(rng, sessions: int, turns: int, order: str) -> list[tuple[int, int]]:
    """(session, turn) pairs in arrival order."""
    if order == "round_robin":
        return [(s, t) for t in range(turns) for s in range(sessions)]
    slots = np.repeat(np.arange(sessions), turns)
    rng.shuffle(slots)
    seen = [0] * sessions
    out = []
    for s in slots.tolist():
        out.append((s, seen[s]))
        seen[s] += 1
    return out


def _persona_requests(rng, pairs, persona_of, prefixes, query_tokens, output_tokens, vocab):
    out = []
    for s, t in pairs:
        p = persona_of[s]
        out.append(Request(f"s{s}-t{t}", 0.0, prefixes[p] + _tokens(rng, query_tokens, vocab),
                           output_tokens, session_id=f"s{s}", prefix_group=f"p{p}"))
    return out


def _personas(rng, *, personas, prefix_tokens, sessions, turns, query_tokens, output_tokens, order, vocab):
    prefixes = [_tokens(rng, prefix_tokens, vocab) for _ in range(personas)]
    pairs = _order(rng, sessions, turns, order)
    return _persona_requests(rng, pairs, [s % personas for s in range(sessions)], prefixes,
                             query_tokens, output_tokens, vocab)


def _zipf(rng, *, personas, prefix_tokens, sessions, turns, query_tokens, output_tokens, order, alpha, vocab):
    prefixes = [_tokens(rng, prefix_tokens, vocab) for _ in range(personas)]
    w = np.arange(1, personas + 1, dtype=float) ** -alpha
    persona_of = rng.choice(personas, size=sessions, p=w / w.sum()).tolist()
    pairs = _order(rng, sessions, turns, order)
    return _persona_requests(rng, pairs, persona_of, prefixes, query_tokens, output_tokens, vocab)


def _bursty(rng, *, personas, prefix_tokens, sessions, turns, query_tokens, output_tokens, turn_gap_s, vocab):
    prefixes = [_tokens(rng, prefix_tokens, vocab) for _ in range(personas)]
    pairs = [(s, t) for s in range(sessions) for t in range(turns)]
    return _persona_requests(rng, pairs, [s % personas for s in range(sessions)], prefixes,
                             query_tokens, output_tokens, vocab)


def _revisit(rng, *, sessions, turns, prefix_tokens, query_tokens, output_tokens, gap_requests,
             noise_tokens, vocab):
    out, k = [], 0
    for s in range(sessions):
        ctx = _tokens(rng, prefix_tokens, vocab)
        for t in range(turns):
            out.append(Request(f"s{s}-t{t}", 0.0, ctx + _tokens(rng, query_tokens, vocab), output_tokens,
                               session_id=f"s{s}", prefix_group=f"s{s}"))
            if t < turns - 1:
                for _ in range(gap_requests):
                    out.append(Request(f"noise-{k}", 0.0, _tokens(rng, noise_tokens, vocab), output_tokens,
                                       session_id=f"noise-{k}", prefix_group=None))
                    k += 1
    return out


def _multiturn(rng, *, personas, prefix_tokens, sessions, turns, query_tokens, output_tokens, order, vocab):
    prefixes = [_tokens(rng, prefix_tokens, vocab) for _ in range(personas)]
    history: dict[int, tuple] = {}
    out = []
    for s, t in _order(rng, sessions, turns, order):
        prev = history.get(s, prefixes[s % personas])
        prompt = prev + _tokens(rng, query_tokens, vocab)
        output = _tokens(rng, output_tokens, vocab)
        history[s] = prompt + output
        out.append(Request(f"s{s}-t{t}", 0.0, prompt, output_tokens, session_id=f"s{s}",
                           prefix_group=f"p{s % personas}", output_token_ids=output))
    return out


def _at_least(lo: int, **flags) -> None:
    """Raise ValueError naming the first flag below ``lo``."""
    for k, v in flags.items():
        if v < lo:
            raise ValueError(f"flag {k!r}: must be >= {lo}, got {v}")


def _zipf_weights(n: int, alpha: float) -> np.ndarray:
    """Probability of rank ``r`` (1-based) proportional to ``r**-alpha``."""
    w = np.arange(1, n + 1, dtype=float) ** -alpha
    return w / w.sum()


def _interleave(rng, streams: list[list]) -> list:
    """Random interleaving of ``streams`` that keeps each stream's order
    (every remaining element equally likely next)."""
    slots = np.repeat(np.arange(len(streams)), [len(x) for x in streams])
    rng.shuffle(slots)
    pos = [0] * len(streams)
    out = []
    for k in slots.tolist():
        out.append(streams[k][pos[k]])
        pos[k] += 1
    return out


def _agents(rng, *, agent_types, system_tokens, manifest_tokens, alpha, sessions, steps, task_tokens,
            result_tokens, output_tokens, vocab, tag=""):
    _at_least(1, agent_types=agent_types, steps=steps)
    system = _tokens(rng, system_tokens, vocab)
    manifests = [_tokens(rng, manifest_tokens, vocab) for _ in range(agent_types)]
    type_of = rng.choice(agent_types, size=sessions, p=_zipf_weights(agent_types, alpha)).tolist()
    runs = []
    for s in range(sessions):
        n = int(rng.integers(2, max(3, 2 * steps)))
        prompt = system + manifests[type_of[s]] + _tokens(rng, task_tokens, vocab)
        run = []
        for t in range(n):
            call = _tokens(rng, output_tokens, vocab)
            run.append(Request(f"{tag}a{s}-t{t}", 0.0, prompt, output_tokens, session_id=f"{tag}a{s}",
                               prefix_group=f"{tag}tools{type_of[s]}", output_token_ids=call))
            prompt = prompt + call + _tokens(rng, result_tokens, vocab)
        runs.append(run)
    return _interleave(rng, runs)


def _rag(rng, *, docs, doc_tokens, system_tokens, k, alpha, requests, query_tokens, output_tokens, doc_order,
         followups, followup_p, vocab, tag=""):
    _at_least(1, docs=docs, k=k)
    if k > docs:
        raise ValueError(f"flag 'k': {k} documents per prompt but the corpus has {docs} ('docs')")
    system = _tokens(rng, system_tokens, vocab)
    corpus = [_tokens(rng, doc_tokens, vocab) for _ in range(docs)]
    p = _zipf_weights(docs, alpha)
    streams = []
    for i in range(requests):
        pick = rng.choice(docs, size=k, replace=False, p=p).tolist()
        if doc_order == "ranked":
            pick.sort()
        ctx = system + tuple(t for d in pick for t in corpus[d])
        conv = []
        for f in range(1 + followups):
            if f and rng.random() >= followup_p:
                break
            conv.append(Request(f"{tag}q{i}-f{f}", 0.0, ctx + _tokens(rng, query_tokens, vocab), output_tokens,
                                session_id=f"{tag}u{i}", prefix_group=f"{tag}d{pick[0]}"))
        streams.append(conv)
    return _interleave(rng, streams)  # a conversation's follow-ups come after its first question


def _scan(rng, *, hot, prefix_tokens, alpha, requests, query_tokens, scan_every, scan_length, scan_tokens,
          output_tokens, vocab):
    _at_least(1, hot=hot)
    prefixes = [_tokens(rng, prefix_tokens, vocab) for _ in range(hot)]
    pick = rng.choice(hot, size=requests, p=_zipf_weights(hot, alpha)).tolist()
    out, k = [], 0
    for i, h in enumerate(pick):
        out.append(Request(f"h{i}", 0.0, prefixes[h] + _tokens(rng, query_tokens, vocab), output_tokens,
                           session_id=f"h{i}", prefix_group=f"p{h}"))
        if scan_every and (i + 1) % scan_every == 0:
            for _ in range(scan_length):
                out.append(Request(f"scan-{k}", 0.0, _tokens(rng, scan_tokens, vocab), output_tokens,
                                   session_id=f"scan-{k}", prefix_group=None))
                k += 1
    return out


def _mix(rng, *, chat_sessions, agent_sessions, rag_requests, oneoff_requests, output_tokens, vocab):
    chat = _multiturn(rng, personas=4, prefix_tokens=1536, sessions=chat_sessions, turns=4, query_tokens=128,
                      output_tokens=output_tokens, order="shuffled", vocab=vocab)
    chat = [attrs.evolve(r, request_id="chat-" + r.request_id, session_id="chat-" + r.session_id) for r in chat]
    agents = _agents(rng, agent_types=3, system_tokens=512, manifest_tokens=2048, alpha=1.0,
                     sessions=agent_sessions, steps=4, task_tokens=128, result_tokens=384,
                     output_tokens=output_tokens, vocab=vocab, tag="agent-")
    rag = _rag(rng, docs=32, doc_tokens=768, system_tokens=256, k=3, alpha=1.0, requests=rag_requests,
               query_tokens=64, output_tokens=output_tokens, doc_order="ranked", followups=1, followup_p=0.3,
               vocab=vocab, tag="rag-")
    oneoff = [Request(f"once-{i}", 0.0, _tokens(rng, int(rng.integers(256, 4096)), vocab), output_tokens,
                      session_id=f"once-{i}") for i in range(oneoff_requests)]
    return _interleave(rng, [chat, agents, rag, oneoff])


GENERATORS: dict[str, Generator] = {
    g.name: g
    for g in (
        Generator("personas", _personas, (*_PERSONA_FLAGS, _ORDER),
                  "SPF seed workload: persona prefix + fresh query, turns do not accumulate"),
        Generator("zipf", _zipf, (*_PERSONA_FLAGS, _ORDER,
                                  Flag("alpha", float, 1.0, "Zipf exponent of persona popularity")),
                  "personas with Zipf-distributed persona popularity per session"),
        Generator("bursty", _bursty, (*_PERSONA_FLAGS,
                                      Flag("turn_gap_s", float, 0.5, "seconds between turns of a burst")),
                  "a session's turns back to back; bursts arrive by the arrival process"),
        Generator("revisit", _revisit, (
            Flag("sessions", int, 8, "number of sessions"),
            Flag("turns", int, 4, "turns per session"),
            Flag("prefix_tokens", int, 2048, "tokens of a session's own context"),
            Flag("query_tokens", int, 128, "fresh query tokens per turn"),
            Flag("output_tokens", int, 32, "tokens to generate per request", low=1),
            Flag("gap_requests", int, 8, "one-off requests between two turns of a session"),
            Flag("noise_tokens", int, 2048, "prompt tokens of a one-off request"),
        ), "sessions come back after a gap of one-off traffic"),
        Generator("multiturn", _multiturn, (
            Flag("personas", int, 4, "number of shared system prefixes", low=1),
            Flag("prefix_tokens", int, 1024, "tokens per system prefix"),
            Flag("sessions", int, 8, "number of sessions"),
            Flag("turns", int, 4, "turns per session"),
            Flag("query_tokens", int, 128, "new query tokens per turn"),
            Flag("output_tokens", int, 32, "tokens generated per turn (by the workload)", low=1),
            _ORDER,
        ), "growing history: prompt = previous prompt + previous output + new query"),
        Generator("agents", _agents, (
            Flag("agent_types", int, 4, "tool manifests (agent types)"),
            Flag("system_tokens", int, 1024, "tokens of the system prompt shared by every agent"),
            Flag("manifest_tokens", int, 2048, "tokens per tool manifest"),
            Flag("alpha", float, 1.0, "Zipf exponent of agent-type popularity"),
            Flag("sessions", int, 24, "agents (sessions)"),
            Flag("steps", int, 4, "steps per agent are drawn from 2..2*steps-1"),
            Flag("task_tokens", int, 256, "tokens of an agent's task"),
            Flag("result_tokens", int, 512, "tokens of a tool result appended per step"),
            Flag("output_tokens", int, 64, "tokens of a tool call (generated, in the next prompt)", low=1),
        ), "tool-using agents: system + tool manifest + task + growing call/result history"),
        Generator("rag", _rag, (
            Flag("docs", int, 48, "documents in the corpus"),
            Flag("doc_tokens", int, 1024, "tokens per document"),
            Flag("system_tokens", int, 512, "tokens of the system prompt"),
            Flag("k", int, 4, "documents per prompt"),
            Flag("alpha", float, 1.0, "Zipf exponent of document popularity"),
            Flag("requests", int, 96, "retrievals (first questions)"),
            Flag("query_tokens", int, 64, "fresh question tokens"),
            Flag("output_tokens", int, 32, "tokens to generate per request", low=1),
            Flag("doc_order", str, "ranked", "document order in the prompt", ("ranked", "retrieved")),
            Flag("followups", int, 2, "most follow-up questions on the same documents"),
            Flag("followup_p", float, 0.4, "probability of each next follow-up", high=1.0),
        ), "retrieval-augmented prompts: system + k shared documents in varying combinations + question"),
        Generator("scan", _scan, (
            Flag("hot", int, 8, "hot prefixes"),
            Flag("prefix_tokens", int, 4096, "tokens per hot prefix"),
            Flag("alpha", float, 0.8, "Zipf exponent of hot-prefix popularity"),
            Flag("requests", int, 128, "requests on the hot set"),
            Flag("query_tokens", int, 128, "fresh query tokens per hot request"),
            Flag("scan_every", int, 16, "hot requests between scans (0: no scans)"),
            Flag("scan_length", int, 12, "one-off prompts per scan", low=1),
            Flag("scan_tokens", int, 2048, "tokens per one-off prompt", low=1),
            Flag("output_tokens", int, 32, "tokens to generate per request", low=1),
        ), "a hot prefix set under periodic scans of one-off prompts"),
        Generator("mix", _mix, (
            Flag("chat_sessions", int, 12, "chat sessions (multiturn, 4 personas of 1536 tokens, 4 turns)"),
            Flag("agent_sessions", int, 10, "agents (3 tool manifests of 2048 tokens)"),
            Flag("rag_requests", int, 40, "retrievals (32 documents of 768 tokens, 3 per prompt)"),
            Flag("oneoff_requests", int, 24, "one-off prompts of 256..4095 fresh tokens"),
            Flag("output_tokens", int, 32, "tokens generated per request", low=1),
        ), "production-like mixture: chat, agents, retrieval and one-off prompts interleaved"),
    )
}

#: Generators added as held-out shapes (issue 14): no shipped policy's
#: parameters were chosen on them (``benchmarks/tune_spf.py`` reports on them
#: apart), and ``spfcore bench``'s suite v1 leaves them out so its figures stay
#: comparable across versions.
HELD_OUT: frozenset[str] = frozenset({"agents", "rag", "scan", "mix"})


def defaults(name: str) -> dict:
    """Every flag of generator ``name`` with its default.

    Raises:
        ValueError: unknown generator.
    """
    return {k: f.default for k, f in _generator(name).all_flags().items()}


def _generator(name: str) -> Generator:
    try:
        return GENERATORS[name]
    except KeyError:
        raise ValueError(f"unknown workload generator {name!r} (available: {', '.join(GENERATORS)})") from None


def _arrivals(n: int, seed: int, arrival: str, rate: float) -> list[float]:
    if arrival == "sequential":
        return [0.0] * n
    if rate <= 0:
        raise ValueError(f"flag 'rate': must be > 0 for arrival={arrival}, got {rate}")
    if arrival == "rate":
        return [i / rate for i in range(n)]
    gaps = np.random.default_rng([seed, 1]).exponential(1.0 / rate, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps).tolist()


def make(name: str, *, seed: int, **flags) -> Workload:
    """Build workload ``name`` deterministically.

    Args:
        name: A key of :data:`GENERATORS`.
        seed: Seed of every random draw (int >= 0).
        **flags: Generator flags (strings are converted, e.g. from the CLI);
            missing ones take their defaults.

    Returns:
        A :class:`Workload` whose ``params`` hold every flag (defaults
        included) and ``seed``; requests in arrival order.

    Raises:
        ValueError: unknown generator, unknown flag or bad flag value (naming
            the flag and what is allowed).
    """
    gen = _generator(name)
    spec = gen.all_flags()
    unknown = set(flags) - set(spec)
    if unknown:
        raise ValueError(f"workload {name!r}: unknown flag(s) {sorted(unknown)} (allowed: {', '.join(spec)})")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"workload {name!r}: seed must be an int >= 0, got {seed!r}")
    values = {k: (f.convert(flags[k]) if k in flags else f.default) for k, f in spec.items()}
    if values["vocab"] <= MIN_TOKEN:
        raise ValueError(f"flag 'vocab': must be > {MIN_TOKEN}, got {values['vocab']}")
    if name != "revisit" and values.get("personas", 1) < 1:
        raise ValueError("flag 'personas': must be >= 1")
    if values["output_tokens"] < 1:
        raise ValueError("flag 'output_tokens': must be >= 1")
    own = {k: values[k] for k in (f.name for f in gen.flags)}
    reqs = gen.fn(np.random.default_rng([seed, 0]), vocab=values["vocab"], **own)
    if not reqs:
        raise ValueError(f"workload {name!r}: flags give no requests ({own})")
    if any(r.num_prompt_tokens < 1 for r in reqs):
        raise ValueError(f"workload {name!r}: flags give an empty prompt ({own})")
    if name == "bursty" and values["arrival"] != "sequential":
        starts = _arrivals(values["sessions"], seed, values["arrival"], values["rate"])
        times = [starts[s] + t * values["turn_gap_s"] for s in range(values["sessions"]) for t in range(values["turns"])]
    else:
        times = _arrivals(len(reqs), seed, values["arrival"], values["rate"])
    reqs = [attrs.evolve(r, arrival_s=float(a)) for r, a in zip(reqs, times)]
    if name == "bursty":  # bursts may overlap in time: keep arrival order
        reqs.sort(key=lambda r: r.arrival_s)
    return Workload(name, {"generator": name, "seed": seed, **values}, reqs)
