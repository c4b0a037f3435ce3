"""``spfcore serve``: vLLM's own OpenAI server with a policy (spfcore/serve.py,
spfcore/engine/metrics.py, the served path of spfcore/engine/vllm_adapter.py).

Fast tests check refusals before start-up, the vLLM arguments built, the
policy channel and the metrics arithmetic. Engine tests (marked ``engine``)
start ``spfcore serve`` as a subprocess on the embedded tiny model, twice:
once with ``spf_expected_utility`` (prefix served from the cache, spfcore
metrics on ``/metrics``, the start-up line, SIGTERM), once with a policy
installed for the test whose victim choice raises (every request answered,
the fault counted and logged once, SIGTERM). The healthy server also gets
out-of-vocabulary token ids (HTTP 400 from :class:`spfcore.serve.TokenIdGuard`,
the server stays up). One more server loses its EngineCore (killed) and
``spfcore serve`` must exit 1 (the supervisor's exit statuses, signal
forwarding and a killed parent are tested fast, with plain child processes).
One more engine test runs the async scheduler variant in-process.

``benchmarks/bench_serve.py``'s tokenizer and first-failure catcher are
tested here too (fast: a tokenizer, a local HTTP server answering 400).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from spfcore import registry
from spfcore.cli import main
from spfcore.engine import metrics as spm
from spfcore.serve import GUARD, build_args, check_policy, out_of_vocabulary, parse_policy_options, supervise
from spfcore.testing import MiniCache

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("argv, message", [
    (["--policy", "belady_oracle"], "needs the future request stream"),
    (["--policy", "no_such_policy"], "'no_such_policy' is not installed"),
    (["--policy", "frequency", "--policy-opt", "bogus=1"], "unknown parameter 'bogus'"),
    (["--policy", "frequency", "--policy-opt", "min_count=lots"], "bad value 'lots' for 'min_count'"),
    (["--policy", "frequency", "--policy-opt", "session_ttl.ttl=3"], "serving policy 'frequency', not 'session_ttl'"),
    (["--policy", "frequency", "--policy-opt", "min_count"], "expected KEY=VALUE"),
])
def test_serve_refuses_before_start(argv, message):
    res = CliRunner().invoke(main, ["serve", *argv])
    assert res.exit_code == 2, res.output  # a usage error, as in gate, simulate and sweep
    assert message in res.output


def test_refusal_comes_before_vllm_is_imported():
    code = ("import sys; from click.testing import CliRunner; from spfcore.cli import main; "
            "r = CliRunner().invoke(main, ['serve', '--policy', 'belady_oracle', '--port', '1']); "
            "print(r.exit_code, 'vllm' in sys.modules, 'prometheus_client' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["2", "False", "False"]


def test_policy_options_both_spellings():
    assert parse_policy_options("frequency", ["min_count=3", "frequency.ghost_factor = 2"]) == {
        "min_count": "3", "ghost_factor": "2"}
    info = check_policy("frequency", {"min_count": "3"})
    assert (info.name, info.distribution) == ("frequency", "spfcore-frequency")


def test_needs_future_is_refused_by_capability():
    with pytest.raises(registry.PolicyConfigError, match="capability needs-future"):
        check_policy("belady_oracle", {})


# -------------------------------------------------------- vLLM's arguments
def test_build_args_tiny_default():
    pytest.importorskip("vllm")
    args = build_args(None, "frequency", {"min_count": "3"},
                      ["--port", "8123", "--num-gpu-blocks-override", "64", "--block-size", "32"])
    assert args.model.endswith("spfcore/engine/models/tiny-llama")
    assert args.model_tag is None
    assert (args.load_format, args.skip_tokenizer_init, args.port) == ("dummy", True, 8123)
    assert args.max_model_len == 63 * 32  # the cache holds it (as the engine runner sizes it)
    assert args.scheduler_cls == "spfcore.engine.vllm_adapter.policy_scheduler"
    assert args.additional_config["spfcore"] == {"policy": "frequency", "options": {"min_count": "3"},
                                                 "metrics": True}


def test_build_args_user_options_win_and_checkpoints_pass_through(tmp_path):
    pytest.importorskip("vllm")
    args = build_args("tiny", "lru", {}, ["--max-model-len", "512", "--load-format", "auto",
                                          "--additional-config", '{"x": 1}'])
    assert (args.max_model_len, args.load_format) == (512, "auto")
    assert args.additional_config["x"] == 1 and args.additional_config["spfcore"]["policy"] == "lru"
    (tmp_path / "config.json").write_text("{}")
    args = build_args(str(tmp_path), "lru", {}, [])
    assert args.model == str(tmp_path) and args.load_format != "dummy"


def test_token_id_guard_only_without_tokenizer(tmp_path):
    pytest.importorskip("vllm")
    assert build_args(None, "lru", {}, ["--middleware", "x.Y"]).middleware == ["x.Y", GUARD]  # presets: ids
    (tmp_path / "config.json").write_text("{}")
    assert GUARD not in (build_args(str(tmp_path), "lru", {}, []).middleware or [])  # vLLM's tokenizer checks


@pytest.mark.parametrize("payload, bad", [
    ({"prompt": [0, 5, 31999]}, None),
    ({"prompt": [1, 32000]}, ("prompt", 32000)),
    ({"prompt": [[1, 2], [3, -1]]}, ("prompt", -1)),
    ({"prompt": "t1 t2 99999"}, None),  # text: the tokenizer's business
    ({"prompt": ["a", "b"]}, None),
    ({"prompt": [True, 3]}, None),
    ({"token_ids": [7, 10 ** 9]}, ("token_ids", 10 ** 9)),
    ({"messages": [{"role": "user", "content": "x"}]}, None),
    ([1, 2, 40000], None),  # not a request object
    ({"prompt": [1e10]}, ("prompt", 1e10)),  # JSON numbers vLLM casts to int: 1e10, 32000.0
    ({"prompt": [1, 32000.0]}, ("prompt", 32000.0)),
    ({"prompt": [1, 7.0, float("nan")]}, ("prompt", float("nan"))),
    ({"prompt": [1, 7.0]}, None),
])
def test_out_of_vocabulary(payload, bad):
    got = out_of_vocabulary(payload, 32000)
    if bad and bad[1] != bad[1]:  # NaN: compare the field and NaN-ness
        assert got[0] == bad[0] and got[1] != got[1]
    else:
        assert got == bad


def _child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _sigterm_self_when(ready: Path) -> "threading.Thread":
    """A started thread that sends SIGTERM to this process once ``ready`` exists
    (the child touches it after installing its handler; supervise passes it on)."""
    import threading

    def run():
        for _ in range(600):
            if ready.exists():
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.05)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_supervise_exit_status():
    """A server that stops by itself is a failure (1), a failing one keeps
    its status, a killed one gets 128 + signal, a SIGTERM is passed on."""
    assert supervise(_child("pass")) == 1
    assert supervise(_child("import sys; sys.exit(3)")) == 3
    assert supervise(_child("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")) == 128 + signal.SIGKILL
    ready = Path(os.environ.get("TMPDIR", "/tmp")) / f"spfcore-supervise-{os.getpid()}"
    ready.unlink(missing_ok=True)
    code = ("import signal, sys, time, pathlib; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); "
            f"pathlib.Path({str(ready)!r}).touch(); time.sleep(60); sys.exit(5)")

    before = signal.getsignal(signal.SIGTERM)
    t = _sigterm_self_when(ready)
    try:
        assert supervise(_child(code)) == 0  # asked to stop, stopped cleanly
    finally:
        t.join()
        ready.unlink(missing_ok=True)
    assert signal.getsignal(signal.SIGTERM) is before  # restored


def test_supervise_kills_a_child_that_ignores_the_signal(capfd):
    """A server that does not act on the passed-on SIGTERM (vLLM still starting up)
    is killed after the grace period: 128 + SIGKILL, said on stderr."""
    ready = Path(os.environ.get("TMPDIR", "/tmp")) / f"spfcore-supervise-ign-{os.getpid()}"
    ready.unlink(missing_ok=True)
    code = ("import signal, time, pathlib; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            f"pathlib.Path({str(ready)!r}).touch(); time.sleep(60)")

    t = _sigterm_self_when(ready)
    try:
        assert supervise(_child(code), grace_s=1.0) == 128 + signal.SIGKILL
    finally:
        t.join()
        ready.unlink(missing_ok=True)
    assert "did not stop within 1 s of the signal; killing it" in capfd.readouterr().err


def test_supervised_server_stops_with_a_killed_parent(tmp_path):
    """A SIGKILLed spfcore serve does not leave its server running (Linux)."""
    import psutil

    pidfile = tmp_path / "child.pid"
    child = f"import os, time, pathlib; pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid())); time.sleep(60)"
    parent = subprocess.Popen([sys.executable, "-c", "import sys; from spfcore.serve import supervise; "
                               f"sys.exit(supervise([sys.executable, '-c', {child!r}]))"], cwd=ROOT)
    try:
        for _ in range(600):
            if pidfile.exists() and pidfile.read_text():
                break
            time.sleep(0.05)
        pid = int(pidfile.read_text())
        assert psutil.Process(pid).ppid() == parent.pid
    finally:
        parent.kill()
        parent.wait()
    for _ in range(100):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)  # the child this test started
        pytest.fail("the server outlived spfcore serve")


def test_build_args_refuses_scheduler_cls_and_late_model():
    pytest.importorskip("vllm")
    import click

    with pytest.raises(click.UsageError, match="--scheduler-cls is set by spfcore serve"):
        build_args(None, "lru", {}, ["--scheduler_cls=x.Y"])
    with pytest.raises(click.UsageError, match="give MODEL first"):
        build_args(None, "lru", {}, ["--port", "1", "tiny"])


def test_served_config_has_one_channel(monkeypatch):
    pytest.importorskip("vllm")
    from spfcore.engine.vllm_adapter import served_config

    assert served_config({"spfcore": {"policy": "frequency", "options": {"min_count": 2}}}) == {
        "policy": "frequency", "options": {"min_count": "2"}, "metrics": False}
    assert served_config({"spfcore": {"policy": "lru", "metrics": True}}) == {
        "policy": "lru", "options": {}, "metrics": True}
    assert served_config({"spfcore": {"policy": "stock"}}) is None
    # the environment variables of an earlier channel are not read: stock vLLM without additional_config
    monkeypatch.setenv("SPFCORE_POLICY", "frequency")
    monkeypatch.setenv("SPFCORE_POLICY_OPTIONS", '{"min_count": 2}')
    assert served_config({}) is None and served_config(None) is None
    with pytest.raises(ValueError, match="must be"):
        served_config({"spfcore": "lru"})
    with pytest.raises(ValueError, match="options must be a JSON object"):
        served_config({"spfcore": {"policy": "lru", "options": ["min_count"]}})


# ------------------------------------------------------------------ metrics
def _sample(name, **labels):
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_metrics_publish_deltas_and_faults():
    c = MiniCache("lru", num_blocks=5)
    m = spm.PolicyMetrics("lru-test", "spfcore", "9")
    before = _sample("spfcore_evictions_total", policy="lru-test")
    c.serve(["a0", "a1"])
    c.serve(["b0", "b1"])
    m.publish(c.rt)
    c.serve(["c0", "c1"])  # evicts cached blocks of a or b
    m.publish(c.rt)
    m.publish(c.rt)  # nothing new: nothing added
    assert c.rt.evictions > 0
    assert _sample("spfcore_evictions_total", policy="lru-test") - before == c.rt.evictions
    assert _sample("spfcore_policy_seconds_count", policy="lru-test", part="hooks") == 2
    assert _sample("spfcore_policy_active", policy="lru-test", distribution="spfcore", version="9") == 1
    m.fault({"policy": "lru-test", "hook": "spfcore_choose_victims", "where": "evict", "error": "x"})
    assert _sample("spfcore_policy_faults_total", policy="lru-test", hook="spfcore_choose_victims",
                   where="evict") == 1
    assert _sample("spfcore_policy_active", policy="lru-test", distribution="spfcore", version="9") == 0


# ------------------------------------------------------- the served engine
RAISING = textwrap.dedent('''
    """A policy that raises when it must choose cached victims (tests of spfcore serve)."""
    import attrs
    from spfcore import hookimpl


    @attrs.frozen
    class Params:
        """No parameters."""


    class ChooseRaises:
        """Release order, but spfcore_choose_victims raises."""

        name = "choose_raises"
        capabilities = frozenset({"scoring"})
        Params = Params

        def __init__(self, params):
            self.params = params

        @hookimpl
        def spfcore_choose_victims(self, candidates, n, now):
            raise RuntimeError("boom: no victim for you")
''')


def _install_raising_plugin(where: Path) -> None:
    """A real distribution (module + dist-info with the entry point) on a
    folder that the server's PYTHONPATH gets."""
    (where / "choose_raises.py").write_text(RAISING)
    info = where / "spfcore_test_choose_raises-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spfcore-test-choose-raises\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[spfcore.policies]\nchoose_raises = choose_raises:ChooseRaises\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``spfcore serve`` as a subprocess (output in ``log``)."""

    def __init__(self, tmp: Path, policy: str, pythonpath: list[str] = ()) -> None:
        self.port = _free_port()
        self.log = tmp / "server.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([*pythonpath, *filter(None, [env.get("PYTHONPATH")])])
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # served: the engine core in its own process
        env["VLLM_LOGGING_LEVEL"] = "INFO"
        cmd = [sys.executable, "-m", "spfcore.cli", "serve", "--policy", policy, "--port", str(self.port),
               "--host", "127.0.0.1", "--num-gpu-blocks-override", "64", "--max-num-seqs", "4",
               "--enable-prompt-tokens-details"]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp,
                                         start_new_session=True)
        import httpx

        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=120)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"spfcore serve exited {self.proc.returncode}:\n{self.text()[-4000:]}")
            try:
                if self.http.get("/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1)
        else:
            self.stop()
            raise RuntimeError(f"spfcore serve not up after 600 s:\n{self.text()[-4000:]}")
        self.model = self.http.get("/v1/models").json()["data"][0]["id"]

    def text(self) -> str:
        return self.log.read_bytes().decode("utf-8", "replace")

    def complete(self, prompt: list[int], max_tokens: int = 4):
        """One completion (token-id prompt) with the openai client; returns the response."""
        import openai

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="none", max_retries=0)
        return client.completions.create(model=self.model, prompt=prompt, max_tokens=max_tokens,
                                         temperature=0.0, extra_body={"ignore_eos": True})

    def metric(self, name: str, **labels) -> float:
        """The sum of a series on /metrics over the samples matching ``labels``."""
        from prometheus_client.parser import text_string_to_metric_families

        total = 0.0
        for fam in text_string_to_metric_families(self.http.get("/metrics").text):
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += s.value
        return total

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM and wait; returns the exit status (killed after ``timeout`` s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode


def _prompt(group: int, query: int, prefix_blocks: int = 10) -> list[int]:
    """Token ids: a shared prefix (``prefix_blocks`` blocks of 32 tokens) per
    group, then a 40-token query."""
    return [1000 + 37 * group + i for i in range(prefix_blocks * 32)] + [20000 + 41 * query + i for i in range(40)]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    pytest.importorskip("vllm")
    server = Server(tmp_path_factory.mktemp("serve-healthy"), "spf_expected_utility")
    yield server
    server.stop()


@pytest.mark.engine
def test_served_prefix_hits_and_metrics(healthy):
    s = healthy
    first = s.complete(_prompt(0, 0))
    assert first.usage.prompt_tokens == 360
    assert (first.usage.prompt_tokens_details.cached_tokens or 0) == 0
    again = s.complete(_prompt(0, 1))  # same 320-token prefix, new query: 10 blocks from the cache
    assert again.usage.prompt_tokens_details.cached_tokens == 320
    assert len(again.choices[0].text or "") >= 0 and again.usage.completion_tokens == 4
    for g in range(1, 7):  # 6 more prefixes of 12 blocks each: more than the 63-block cache holds
        s.complete(_prompt(g, g))
    assert s.metric("vllm:prefix_cache_hits_total") >= 320
    assert s.metric("spfcore_evictions_total", policy="spf_expected_utility") > 0
    assert s.metric("spfcore_policy_seconds_count", policy="spf_expected_utility", part="hooks") > 0
    # served by its compiled runtime (no hooks run): all of spfcore's time is the evictor part
    assert s.metric("spfcore_policy_seconds_sum", policy="spf_expected_utility", part="hooks") == 0
    assert s.metric("spfcore_policy_seconds_sum", policy="spf_expected_utility", part="evictor") > 0
    assert s.metric("spfcore_policy_active", policy="spf_expected_utility",
                    distribution="spfcore-spf-expected-utility") == 1
    assert s.metric("spfcore_policy_faults_total") == 0
    lines = [ln for ln in s.text().splitlines() if "spfcore policy spf_expected_utility" in ln]
    assert len(lines) == 1, lines
    assert re.search(r"spfcore policy spf_expected_utility \(spfcore-spf-expected-utility 0\.1\.0\) "
                     r"params \{.*\"variant\": \"utility\".*\} orders evictions: Policy\w*Scheduler, "
                     r"64 blocks of 32 tokens", lines[0])


@pytest.mark.engine
def test_served_refuses_out_of_vocabulary_ids(healthy):
    """Under --skip-tokenizer-init an id >= the vocabulary (32000) is refused
    with 400 (it used to kill the engine, then the server), the server stays up."""
    s = healthy
    for prompt, bad in (([1, 2, 32000], 32000), ([[5, 6], [7, -3]], -3)):
        r = s.http.post("/v1/completions", json={"model": s.model, "prompt": prompt, "max_tokens": 2})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert (err["type"], err["param"], err["code"]) == ("BadRequestError", "prompt", 400)
        assert f"Token id {bad} in 'prompt' is out of vocabulary: the model has 32000 token ids" in err["message"]
    ok = s.http.post("/v1/completions", json={"model": s.model, "prompt": [1, 2, 31999], "max_tokens": 2,
                                              "stream": True, "ignore_eos": True})
    assert ok.status_code == 200 and ok.text.rstrip().endswith("data: [DONE]"), ok.text
    assert s.complete(_prompt(0, 2)).usage.completion_tokens == 4
    assert s.proc.poll() is None and s.http.get("/health").status_code == 200


@pytest.mark.engine
def test_served_shuts_down_on_sigterm(healthy):
    assert healthy.stop() == 0
    assert "Application shutdown complete" in healthy.text()


@pytest.mark.engine
def test_raising_policy_keeps_serving(tmp_path):
    pytest.importorskip("vllm")
    plugins = tmp_path / "site"
    plugins.mkdir()
    _install_raising_plugin(plugins)
    s = Server(tmp_path, "choose_raises", [str(plugins)])
    try:
        for g in range(8):  # the cache fills after ~5 prefixes: cached victims needed, the hook raises
            r = s.complete(_prompt(g, g))
            assert r.usage.completion_tokens == 4
        again = s.complete(_prompt(7, 99))  # still serving, still caching (vLLM's own order)
        assert again.usage.prompt_tokens_details.cached_tokens == 320
        assert s.http.get("/health").status_code == 200
        assert s.metric("spfcore_policy_faults_total", policy="choose_raises", hook="spfcore_choose_victims",
                        where="evict") == 1
        assert s.metric("spfcore_fail_open_allocations_total", policy="choose_raises") >= 3
        assert s.metric("spfcore_policy_active", policy="choose_raises") == 0
        logged = [ln for ln in s.text().splitlines() if "spfcore policy choose_raises failed" in ln]
        assert len(logged) == 1 and "boom: no victim for you" in logged[0], logged
        assert "spfcore: block pool consistent after the policy fault" in s.text()
    finally:
        assert s.stop() == 0


@pytest.mark.engine
def test_engine_death_exits_non_zero(tmp_path):
    """vLLM's server exits 0 when its engine dies; spfcore serve must not."""
    pytest.importorskip("vllm")
    import psutil

    s = Server(tmp_path, "lru")
    try:
        cores = [p for p in psutil.Process(s.proc.pid).children(recursive=True)
                 if "EngineCore" in " ".join(p.cmdline()) or "EngineCore" in p.name()]
        assert len(cores) == 1, cores
        cores[0].kill()  # the EngineCore this test started
        rc = s.proc.wait(180)
    finally:
        s.stop()
    assert rc == 1, s.text()[-3000:]
    assert "spfcore serve: vLLM's server stopped without being asked to" in s.text()


@pytest.mark.engine
def test_async_scheduler_variant_keeps_lru_and_the_pool():
    """PolicyAsyncScheduler (what policy_scheduler builds where vLLM schedules
    asynchronously, e.g. on GPU) caches exactly what stock vLLM does with lru
    and keeps vLLM's block pool consistent. vLLM's CPU platform turns async
    scheduling off, so this drives the async variant's bookkeeping in vLLM's
    synchronous loop; the overlapped loop itself runs only on GPU."""
    pytest.importorskip("vllm")
    from test_engine_adapter import BS, EXPECTED_LRU, NUM_BLOCKS, adapter_workload

    from spfcore.engine.runner import EngineSpec, open_engine
    from spfcore.engine.vllm_adapter import PolicyAsyncScheduler, check_block_pool

    with open_engine(EngineSpec(block_size=BS, num_blocks=NUM_BLOCKS, async_scheduling=True), "lru") as s:
        assert type(s.scheduler) is PolicyAsyncScheduler
        cell = s.run(adapter_workload(), 0)
        check_block_pool(s.scheduler)
        assert [r["cached_tokens"] for r in cell["requests"]] == EXPECTED_LRU
        assert cell["policy_faults"] == 0 and cell["evictions"] > 0


# ------------------------------------------- benchmarks/bench_serve.py parts
def _bench_serve():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_serve", ROOT / "benchmarks" / "bench_serve.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_tokenizer_fits_vllms_text_bound(tmp_path):
    """The word-level tokenizer's text stays within vLLM's pre-tokenization
    bound (tokens x longest token) and encodes back to the same ids; the old
    one (separators outside the tokens) exceeded it: the H200's HTTP 400."""
    pytest.importorskip("vllm")
    import random

    from vllm.tokenizers import get_tokenizer

    tok = get_tokenizer(str(_bench_serve().make_model_dir("tiny", tmp_path / "m")))
    assert tok.vocab_size == 32000 and tok.max_chars_per_token == len("\u2581t31999")
    rng = random.Random(7)
    ids = [rng.randrange(32000) for _ in range(2176)]
    text = tok.decode(ids)
    assert text.startswith(f"t{ids[0]} t{ids[1]} ")
    assert tok.encode(text, add_special_tokens=False) == ids
    assert len(text) <= len(ids) * tok.max_chars_per_token
    old = " ".join(f"t{i}" for i in ids)  # the old tokenizer's text: more than its bound (6 chars a token)
    assert len(old) > len(ids) * len("t31999")


def test_bench_first_failure_keeps_the_body():
    """vLLM's benchmark client keeps only "Bad Request"; the catcher keeps
    the status and body of the first failure, through the client's own
    request function, against a real HTTP server."""
    pytest.importorskip("vllm")
    import asyncio

    import aiohttp
    from aiohttp import web
    from vllm.benchmarks.lib.endpoint_request_func import ASYNC_REQUEST_FUNCS, RequestFuncInput

    body = {"error": {"message": "This model's maximum context length is 2244 tokens.", "code": 400}}

    async def handler(request):
        await request.json()
        return web.json_response(body, status=400)

    async def run(catcher):
        app = web.Application()
        app.router.add_post("/v1/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        inp = RequestFuncInput(prompt="t1 t2 t3", api_url=f"http://127.0.0.1:{port}/v1/completions",
                               prompt_len=3, output_len=4, model="bench")
        try:
            async with aiohttp.ClientSession() as session:
                outs = [await ASYNC_REQUEST_FUNCS["vllm"](request_func_input=inp, session=session)
                        for _ in range(2)]
        finally:
            await runner.cleanup()
        return outs

    bs = _bench_serve()
    original = ASYNC_REQUEST_FUNCS["vllm"]
    with bs._FirstFailure("vllm") as caught:
        outs = asyncio.run(run(caught))
    assert ASYNC_REQUEST_FUNCS["vllm"] is original
    assert [o.success for o in outs] == [False, False] and outs[0].error == "Bad Request"
    assert caught.seen["status"] == 400 and caught.seen["reason"] == "Bad Request"
    assert json.loads(caught.seen["body"]) == body
    assert caught.seen["request"]["prompt"] == "<str of length 8>" and caught.seen["request"]["max_tokens"] == 4
