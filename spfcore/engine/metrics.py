"""Prometheus metrics of a policy in a served vLLM (``spfcore serve``).

The scheduler, and with it the policy, runs in vLLM's EngineCore process; the
``/metrics`` endpoint is served by the API server process. They meet through
prometheus-client's multiprocess mode, as vLLM's own metrics do with several
API servers (``vllm/v1/metrics/prometheus.py``): ``spfcore serve`` sets
``PROMETHEUS_MULTIPROC_DIR`` before vLLM (and prometheus-client) is imported,
both processes write their samples there, and vLLM's ``/metrics`` mount reads
them all through a ``MultiProcessCollector``. Without that variable (e.g. an
in-process engine) the metrics land in prometheus-client's default registry.

Metrics (label ``policy`` on every one):

* ``spfcore_evictions_total``: cached blocks the policy evicted (blocks).
* ``spfcore_policy_seconds``: histogram of the policy's wall time per
  scheduler step, seconds, label ``part``: ``hooks`` (the plugin's hook
  calls) or ``evictor`` (spfcore's own bookkeeping around them: the
  policy-ordered free queue, re-scoring, validation; all of a compiled
  runtime's time, whose hooks part stays 0).
* ``spfcore_pins_refused_total``: pins refused by the pin cap (blocks);
  ``spfcore_pinned_blocks``: free blocks pinned now (gauge).
* ``spfcore_hints_issued_total`` / ``spfcore_hints_used_total``: prefetch
  hints issued by the policy / hints that a later request hit.
* ``spfcore_policy_faults_total``: plugin faults, labels ``hook`` and
  ``where`` (the adapter step); ``spfcore_fail_open_allocations_total``:
  allocations served in vLLM's own order because of a fault.
* ``spfcore_policy_active``: 1 while the policy orders evictions, 0 after a
  fault (labels ``distribution``, ``version``).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

#: Histogram buckets of ``spfcore_policy_seconds``, seconds (10 us .. 1 s).
BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0)

_METRICS: dict | None = None


def _metrics() -> dict:
    """The metric objects, created once per process (prometheus-client
    refuses a second registration of a name)."""
    global _METRICS
    if _METRICS is None:
        _METRICS = {
            "evictions": Counter("spfcore_evictions", "Cached KV blocks evicted by the policy (blocks).",
                                 ["policy"]),
            "seconds": Histogram("spfcore_policy_seconds",
                                 "Policy wall time per scheduler step (s); part=hooks: the plugin's hooks, "
                                 "part=evictor: spfcore's free queue, re-scoring and checks around them (a compiled runtime: all).",
                                 ["policy", "part"], buckets=BUCKETS),
            "pins_refused": Counter("spfcore_pins_refused", "Pins refused by the pin cap (blocks).", ["policy"]),
            "pinned": Gauge("spfcore_pinned_blocks", "Free KV blocks pinned by the policy now.", ["policy"],
                            multiprocess_mode="livemostrecent"),
            "hints_issued": Counter("spfcore_hints_issued", "Prefetch hints issued by the policy.", ["policy"]),
            "hints_used": Counter("spfcore_hints_used", "Prefetch hints a later request hit.", ["policy"]),
            "faults": Counter("spfcore_policy_faults", "Plugin faults (the engine failed open to vLLM's order).",
                              ["policy", "hook", "where"]),
            "fail_open": Counter("spfcore_fail_open_allocations",
                                 "KV allocations served in vLLM's own order after a plugin fault.", ["policy"]),
            "active": Gauge("spfcore_policy_active", "1 while the policy orders evictions, 0 after a fault.",
                            ["policy", "distribution", "version"], multiprocess_mode="livemostrecent"),
        }
    return _METRICS


class PolicyMetrics:
    """Publishes one served policy's counters to Prometheus.

    The runtime keeps cumulative counters (:meth:`spfcore.runtime.PolicyRuntime.stats`);
    :meth:`publish` adds what changed since its last call, so it may be called
    as often as wanted (the adapter calls it after every scheduler step). A
    new runtime (after a prefix-cache reset) starts from zero.

    Args:
        policy: The policy's name (label ``policy``).
        distribution, version: Its distribution and version (labels of
            ``spfcore_policy_active``).
    """

    def __init__(self, policy: str, distribution: str = "", version: str = "") -> None:
        m = _metrics()
        self.policy = policy
        self._evictions = m["evictions"].labels(policy)
        self._hooks = m["seconds"].labels(policy, "hooks")
        self._evictor = m["seconds"].labels(policy, "evictor")
        self._pins_refused = m["pins_refused"].labels(policy)
        self._pinned = m["pinned"].labels(policy)
        self._issued = m["hints_issued"].labels(policy)
        self._used = m["hints_used"].labels(policy)
        self._fail_open = m["fail_open"].labels(policy)
        self._faults = m["faults"]
        self._active = m["active"].labels(policy, distribution, version)
        self._active.set(1)
        self._runtime = None
        self._last = (0, 0.0, 0.0, 0, 0, 0)
        self._fail_open_seen = 0

    def publish(self, runtime, queue=None) -> None:
        """Add the runtime's counter changes since the last call; observe the
        step's hook and evictor seconds (only when the policy ran).

        Args:
            runtime: The :class:`~spfcore.runtime.PolicyRuntime` in charge.
            queue: The :class:`~spfcore.engine.vllm_adapter.PolicyFreeQueue`
                (for ``fail_open_allocations``), or ``None``.
        """
        if runtime is not self._runtime:
            self._runtime, self._last = runtime, (0, 0.0, 0.0, 0, 0, 0)
            self._fail_open_seen = 0
        ev = getattr(runtime, "evictor", None)  # (a compiled runtime has none: its own count, if it pins)
        refused = ev.pins_refused if ev is not None else getattr(runtime, "pins_refused", 0)
        now = (runtime.evictions, runtime.hook_seconds, runtime.policy_seconds, refused,
               runtime.hints_issued, runtime.hints_used)
        last, self._last = self._last, now
        if now[0] > last[0]:
            self._evictions.inc(now[0] - last[0])
        hooks = now[1] - last[1]
        if now[2] > last[2] or hooks > 0:
            self._hooks.observe(hooks)
            self._evictor.observe(max(0.0, (now[2] - last[2]) - hooks))
        if now[3] > last[3]:
            self._pins_refused.inc(now[3] - last[3])
        if now[4] > last[4]:
            self._issued.inc(now[4] - last[4])
        if now[5] > last[5]:
            self._used.inc(now[5] - last[5])
        self._pinned.set(ev.num_pinned if ev else 0)
        self.publish_fail_open(queue)

    def publish_fail_open(self, queue) -> None:
        """Add the queue's fail-open allocations since the last call."""
        if queue is None:
            return
        n = queue.fail_open_allocations
        if n > self._fail_open_seen:
            self._fail_open.inc(n - self._fail_open_seen)
        self._fail_open_seen = n

    def fault(self, fault: dict) -> None:
        """Count one plugin fault (``PolicyFreeQueue.fault``: ``{"policy",
        "hook", "where", "error"}``) and mark the policy inactive."""
        self._faults.labels(self.policy, fault.get("hook") or "-", fault.get("where") or "-").inc()
        self._active.set(0)

    def resumed(self) -> None:
        """The policy is in charge again (a fresh runtime after a reset)."""
        self._active.set(1)
