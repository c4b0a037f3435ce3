"""``spfcore serve`` under vLLM's own benchmark client, arms side by side.

For each repetition and arm (order alternating lru, spf, spf, lru, ... so that
drift hits both arms alike) this starts ``spfcore serve`` on a free port,
drives it with vLLM's serving benchmark (``vllm bench serve``: the module
``vllm.benchmarks.serve``, run in this process) on its ``prefix_repetition``
dataset (``--num-prefixes`` shared prefixes of ``--prefix-len`` tokens, each
request a random prefix + a fresh ``--suffix-len`` suffix), reads vLLM's and
spfcore's series from the server's ``/metrics``, and stops it with SIGTERM.
It prints one row per run, then per arm the mean over repetitions with the
min..max range, and writes every figure to ``--output`` (JSON).

No hub and no tokenizer download: the model is a preset's ``config.json``
(random weights, ``--load-format dummy``) plus a word-level tokenizer written
here (token ``i`` <-> the word ``t<i>``, ``vocab_size`` words), which encodes
and decodes every token-id sequence exactly, so vLLM's benchmark datasets,
which draw random token ids and send text, work unchanged and the prompts
have exactly the lengths asked for. Each token carries its separating space
(``▁t<i>``, as a real BPE token carries its leading space): vLLM's server
refuses, before tokenizing, a text longer than its input-token limit times
the longest token's characters, and separators outside the tokens made the
prompts of the H200 run (8,320 tokens, vocab 128,256) exceed that bound:
HTTP 400 for every request. The first failing response's status and body
are printed and kept in the row (``first_failure``); a run whose requests
all fail stops the benchmark (exit status 1).

Usage (H200, Llama-3.2-3B architecture, the gate's cache pressure; see
scripts/gpu_serve_bench.sh)::

    python benchmarks/bench_serve.py --model llama-3.2-3b --arms lru,spf_expected_utility --reps 2

CPU smoke run (minutes)::

    python benchmarks/bench_serve.py --model tiny --num-blocks 64 --block-size 32 --prefix-len 320 \\
        --num-prefixes 8 --suffix-len 32 --output-len 4 --num-prompts 24 --reps 1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spfcore.engine.presets import model_config, resolve_model


#: Word-level tokens carry their separating space as this mark (sentencepiece's).
SPACE = "\u2581"


def make_model_dir(preset: str, out: Path) -> Path:
    """A model folder: the preset's ``config.json`` plus a word-level tokenizer
    of ``vocab_size`` words, no special tokens. Returns ``out``.

    Token ``i`` is ``▁t<i>``: the decoded text of ``n`` tokens is the words
    ``t<i>`` joined by single spaces, at most ``n`` times the longest token's
    characters, the bound vLLM's server checks a text prompt against before
    tokenizing it (``TokenizeParams._text_len_check``: input-token limit x
    ``max_chars_per_token``); encoding that text gives back the ids exactly.
    """
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    cfg = model_config(preset)
    out.mkdir(parents=True, exist_ok=True)
    # transformers_version: else transformers warns of a Mistral regex for any local tokenizer
    (out / "config.json").write_text(json.dumps({**cfg, "transformers_version": transformers.__version__}, indent=1))
    vocab = int(cfg["vocab_size"])
    tok = Tokenizer(models.WordLevel({f"{SPACE}t{i}": i for i in range(vocab)}, unk_token=f"{SPACE}t0"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement=SPACE, prepend_scheme="always", split=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": int(cfg.get("max_position_embeddings", 4096))}))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metrics(base: str) -> dict:
    """Selected series from /metrics, summed over labels."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    want = {"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "spfcore_evictions_total",
            "spfcore_policy_seconds_sum", "spfcore_policy_seconds_count", "spfcore_policy_faults_total",
            "spfcore_fail_open_allocations_total", "spfcore_hints_issued_total", "spfcore_hints_used_total"}
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(httpx.get(f"{base}/metrics", timeout=30).text):
        for s in fam.samples:
            key = s.name
            if s.name.startswith("spfcore_policy_seconds"):
                key = f"{s.name}[{s.labels.get('part')}]"
            if s.name in want:
                out[key] = out.get(key, 0.0) + s.value
    return out


class Served:
    """``spfcore serve`` in a subprocess; logs to ``log``."""

    def __init__(self, model_dir: Path, policy: str, a, log: Path) -> None:
        import httpx

        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "spfcore.cli", "serve", str(model_dir), "--policy", policy,
               "--load-format", "dummy", "--port", str(self.port), "--host", "127.0.0.1",
               "--served-model-name", "bench", "--num-gpu-blocks-override", str(a.num_blocks),
               "--block-size", str(a.block_size), "--max-num-seqs", str(a.max_num_seqs),
               "--max-model-len", str(a.prefix_len + a.suffix_len + a.output_len + 64),
               "--gpu-memory-utilization", str(a.gpu_memory_utilization), *a.serve_arg]
        if a.enforce_eager:
            cmd.append("--enforce-eager")
        self.log = log
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        t0 = time.monotonic()
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"spfcore serve exited {self.proc.returncode}; see {log}")
                try:
                    if httpx.get(f"{self.base}/health", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() - t0 > a.start_timeout:
                    raise RuntimeError(f"spfcore serve not up after {a.start_timeout} s; see {log}")
                time.sleep(1)
        except BaseException:  # not up, or SIGTERM / Ctrl-C while starting: no server left behind
            self.stop()
            raise
        self.start_s = time.monotonic() - t0

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode


class _FirstFailure:
    """Keeps the status, reason and body of the first non-200 response of
    vLLM's benchmark client (which itself keeps only the HTTP reason, e.g.
    "Bad Request"), and the shape of the request that got it.

    Use as a context manager around ``vllm.benchmarks.serve.main``: it wraps
    the client's request function for ``backend`` (its session's ``post``)
    and restores it on exit. ``self.seen`` is ``None`` or a dict
    ``{"status", "reason", "body", "url", "request"}`` (the request's fields,
    its prompt shortened to its type and length in characters or items).
    """

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.seen: dict | None = None

    def __enter__(self) -> "_FirstFailure":
        from vllm.benchmarks.lib.endpoint_request_func import ASYNC_REQUEST_FUNCS

        self._funcs = ASYNC_REQUEST_FUNCS
        self._orig = orig = ASYNC_REQUEST_FUNCS[self.backend]
        catcher = self

        class Session:
            def __init__(self, session) -> None:
                self._s = session

            def __getattr__(self, name):
                return getattr(self._s, name)

            def post(self, *args, **kw):
                return _Post(self._s.post(*args, **kw), catcher, kw)

        async def request(request_func_input, session, pbar=None):
            return await orig(request_func_input=request_func_input, session=Session(session), pbar=pbar)

        ASYNC_REQUEST_FUNCS[self.backend] = request
        return self

    def __exit__(self, *exc) -> None:
        self._funcs[self.backend] = self._orig


class _Post:
    """``session.post(...)``'s context manager, reading the body of the first failure."""

    def __init__(self, cm, catcher: _FirstFailure, kw: dict) -> None:
        self._cm, self._catcher, self._kw = cm, catcher, kw

    async def __aenter__(self):
        resp = await self._cm.__aenter__()
        if resp.status != 200 and self._catcher.seen is None:
            self._catcher.seen = {"status": resp.status, "reason": resp.reason, "url": str(self._kw.get("url", "")),
                                  "body": "", "request": _shape(self._kw.get("json"))}
            self._catcher.seen["body"] = (await resp.read()).decode("utf-8", "replace")[:4000]
        return resp

    async def __aexit__(self, *exc):
        return await self._cm.__aexit__(*exc)


def _shape(payload) -> dict | None:
    """A request's JSON fields, its prompt replaced by its type and length."""
    if not isinstance(payload, dict):
        return None
    out = dict(payload)
    prompt = out.pop("prompt", None)
    if prompt is not None:
        out["prompt"] = f"<{type(prompt).__name__} of length {len(prompt)}>"
    return out


def _bench_args(a, base: str, model_dir: Path, seed: int, result: Path) -> argparse.Namespace:
    """vLLM's own ``vllm bench serve`` arguments."""
    from vllm.benchmarks.serve import add_cli_args

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older vLLM
        from vllm.utils import FlexibleArgumentParser
    p = FlexibleArgumentParser()
    add_cli_args(p)
    argv = ["--backend", "vllm", "--base-url", base, "--endpoint", "/v1/completions", "--model", "bench",
            "--tokenizer", str(model_dir), "--dataset-name", "prefix_repetition",
            "--prefix-repetition-prefix-len", str(a.prefix_len), "--prefix-repetition-suffix-len", str(a.suffix_len),
            "--prefix-repetition-num-prefixes", str(a.num_prefixes),
            "--prefix-repetition-output-len", str(a.output_len), "--num-prompts", str(a.num_prompts),
            "--seed", str(seed), "--request-rate", str(a.request_rate), "--max-concurrency", str(a.max_concurrency),
            "--ignore-eos", "--percentile-metrics", "ttft,tpot,e2el", "--metric-percentiles", "50,95,99",
            "--disable-tqdm", "--save-result", "--result-dir", str(result.parent), "--result-filename", result.name]
    return p.parse_args(argv)


KEYS = ("mean_ttft_ms", "median_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "mean_e2el_ms", "request_throughput",
        "output_throughput", "total_token_throughput", "duration", "completed")


def run_one(a, model_dir: Path, arm: str, rep: int, logs: Path) -> dict:
    """One server start + one benchmark run; returns the row."""
    from vllm.benchmarks.serve import main as bench_main

    srv = Served(model_dir, arm, a, logs / f"serve-{arm}-{rep}.log")
    try:
        before = _metrics(srv.base)
        result = logs / f"bench-{arm}-{rep}.json"
        with _FirstFailure("vllm") as caught:
            res = bench_main(_bench_args(a, srv.base, model_dir, a.seed + rep, result))
        if not isinstance(res, dict):  # vLLM versions whose main returns nothing: its saved result
            res = json.loads(result.read_text())
        after = _metrics(srv.base)
    finally:
        rc = srv.stop()
    if caught.seen:
        print(f"!! {res.get('failed')} of {a.num_prompts} requests failed; the first got HTTP "
              f"{caught.seen['status']} {caught.seen['reason']}: {caught.seen['body']}\n"
              f"!! its request: {json.dumps(caught.seen['request'])}", flush=True)
    started = re.search(r"spfcore policy \S+ .* orders evictions: (\w+)", srv.log.read_text(errors="replace"))
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    q = d.get("vllm:prefix_cache_queries_total", 0.0)
    steps = d.get("spfcore_policy_seconds_count[hooks]", 0.0)
    pol_s = d.get("spfcore_policy_seconds_sum[hooks]", 0.0) + d.get("spfcore_policy_seconds_sum[evictor]", 0.0)
    row = {"arm": arm, "rep": rep, "seed": a.seed + rep, "start_s": srv.start_s, "exit_status": rc,
           "scheduler": started.group(1) if started else None,  # PolicyAsyncScheduler: vLLM's overlapped loop
           **{k: res.get(k) for k in KEYS},
           "prefix_hit_rate": d.get("vllm:prefix_cache_hits_total", 0.0) / q if q else 0.0,
           "evictions": d.get("spfcore_evictions_total", 0.0),
           "policy_s": pol_s, "policy_ms_per_request": 1e3 * pol_s / max(1, res.get("completed") or 1),
           "policy_steps": steps, "policy_faults": d.get("spfcore_policy_faults_total", 0.0),
           "failed": res.get("failed", 0), "first_failure": caught.seen, "metrics_delta": d}
    return row


def _fmt(rows: list[dict]) -> str:
    cols = [("arm", "{}"), ("rep", "{}"), ("scheduler", "{}"), ("prefix_hit_rate", "{:.1%}"), ("mean_ttft_ms", "{:.1f}"),
            ("median_ttft_ms", "{:.1f}"), ("p95_ttft_ms", "{:.1f}"), ("request_throughput", "{:.3f}"),
            ("output_throughput", "{:.1f}"), ("evictions", "{:.0f}"), ("policy_ms_per_request", "{:.2f}"),
            ("policy_faults", "{:.0f}")]
    head = " | ".join(c for c, _ in cols)
    lines = [head, " | ".join("---" for _ in cols)]
    for r in rows:
        lines.append(" | ".join(f.format(r[c]) if r.get(c) is not None else "-" for c, f in cols))
    return "\n".join(lines)


def summary(rows: list[dict], arms: list[str]) -> str:
    """Per arm: mean over repetitions and [min, max] of TTFT and throughput;
    then each arm's difference from the first arm (paired by repetition).
    Runs with a failed request are left out (and counted)."""
    out = ["arm | runs | mean TTFT ms (min..max) | p95 TTFT ms (min..max) | req/s (min..max) | prefix hit"]
    out.append("--- | --- | --- | --- | --- | ---")
    bad = [r for r in rows if r.get("failed") or not r.get("completed")]
    by = {arm: [r for r in rows if r["arm"] == arm and r not in bad] for arm in arms}
    for arm, rs in by.items():
        if not rs:
            continue

        def rng(k, f):
            v = [r[k] for r in rs]
            return f"{f.format(statistics.fmean(v))} ({f.format(min(v))}..{f.format(max(v))})"
        out.append(f"{arm} | {len(rs)} | {rng('mean_ttft_ms', '{:.1f}')} | {rng('p95_ttft_ms', '{:.1f}')} | "
                   f"{rng('request_throughput', '{:.3f}')} | {statistics.fmean(r['prefix_hit_rate'] for r in rs):.1%}")
    base = by.get(arms[0], [])
    for arm in arms[1:]:
        pairs = [(b, r) for b in base for r in by.get(arm, []) if b["rep"] == r["rep"]]
        if not pairs:
            continue
        dt = [100 * (r["mean_ttft_ms"] / b["mean_ttft_ms"] - 1) for b, r in pairs]
        dr = [100 * (r["request_throughput"] / b["request_throughput"] - 1) for b, r in pairs]
        out.append(f"\n{arm} vs {arms[0]}, per repetition: mean TTFT {', '.join(f'{x:+.1f}%' for x in dt)}; "
                   f"throughput {', '.join(f'{x:+.1f}%' for x in dr)} ({len(pairs)} pairs: with fewer than 3, "
                   "no interval; a difference inside the spread between repetitions is not a result)")
    if bad:
        out.append(f"\nleft out: {len(bad)} run(s) with failed requests "
                   "(" + ", ".join(f"{r['arm']} rep {r['rep']}" for r in bad) + "; see first_failure in the JSON)")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama-3.2-3b", help="spfcore preset (its config.json)")
    ap.add_argument("--arms", default="lru,spf_expected_utility", help="policies, comma separated")
    ap.add_argument("--reps", type=int, default=2, help="repetitions (arm order alternates)")
    ap.add_argument("--num-blocks", type=int, default=3561, help="KV cache blocks (the gate's H200 size)")
    ap.add_argument("--block-size", type=int, default=16, help="tokens per block (CPU: a multiple of 32)")
    ap.add_argument("--prefix-len", type=int, default=8192, help="tokens of each shared prefix")
    ap.add_argument("--num-prefixes", type=int, default=16, help="distinct prefixes (16 x 8192: pressure 2.3)")
    ap.add_argument("--suffix-len", type=int, default=128, help="tokens of each request's own suffix")
    ap.add_argument("--output-len", type=int, default=32, help="tokens generated per request")
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--request-rate", default="inf", help="requests/s (inf: as fast as --max-concurrency allows)")
    ap.add_argument("--max-concurrency", type=int, default=4)
    ap.add_argument("--max-num-seqs", type=int, default=8)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    ap.add_argument("--no-enforce-eager", dest="enforce_eager", action="store_false",
                    help="let vLLM compile / capture CUDA graphs (slower start)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--start-timeout", type=float, default=600)
    ap.add_argument("--serve-arg", action="append", default=[], help="extra `spfcore serve` option (repeatable)")
    ap.add_argument("--output", type=Path, default=Path("serve_bench.json"))
    a = ap.parse_args(argv)
    # SIGTERM (e.g. `timeout`): unwind, so that the running server is stopped (it has its own session)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    resolve_model(a.model)  # a bad preset fails here
    work = Path(tempfile.mkdtemp(prefix="spfcore-serve-bench-"))
    model_dir = make_model_dir(a.model, work / "model")
    logs = a.output.parent / (a.output.stem + "-logs")
    logs.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    for rep in range(a.reps):
        order = arms if rep % 2 == 0 else arms[::-1]
        for arm in order:
            print(f"== rep {rep} arm {arm}", flush=True)
            rows.append(run_one(a, model_dir, arm, rep, logs))
            tmp = a.output.with_suffix(".tmp")
            tmp.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "rows": rows}, indent=1))
            os.replace(tmp, a.output)
            if not rows[-1].get("completed"):
                print(f"\nevery request of {arm} rep {rep} failed (first failure above): stopping. "
                      f"Written: {a.output} (server logs in {logs})")
                return 1
    print()
    print(_fmt(rows))
    print()
    print(summary(rows, arms))
    print(f"\nwritten: {a.output} (server logs in {logs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
