"""``spfcore serve``: vLLM's own OpenAI-compatible server with a policy in its scheduler.

Nothing here is a server: the command checks the policy, then a child
process builds vLLM's own ``vllm serve`` arguments (vLLM's argument parser,
every option it knows) and runs vLLM's serve entry point. What spfcore adds:

* ``scheduler_cls`` = :func:`spfcore.engine.vllm_adapter.policy_scheduler`,
  which builds vLLM's async scheduler variant with the policy queue whenever
  vLLM settles on async scheduling (its default in 0.32, GPU and CPU), the
  synchronous one otherwise;
* the policy, its options and ``metrics`` in vLLM's ``additional_config``
  under ``"spfcore"``, read by the scheduler in vLLM's EngineCore process;
* ``PROMETHEUS_MULTIPROC_DIR`` (a fresh temporary folder, removed at exit,
  unless already set) before vLLM is imported, so that the policy's metrics,
  written in the EngineCore process, appear on the API server's ``/metrics``
  beside vLLM's own (:mod:`spfcore.engine.metrics`);
* for a preset model (default ``tiny``; ``spfcore.engine.presets``): its
  folder, ``--load-format dummy`` (random weights) and
  ``--skip-tokenizer-init`` (prompts are token ids); on CPU also
  ``--enforce-eager --block-size 32 --gpu-memory-utilization 0.1`` (CPU
  attention needs blocks of a multiple of 32 tokens; the flag is the share of
  the NUMA node's memory reserved). Options given on the command line win.

Policies that need the future request stream (capability ``needs-future``,
e.g. ``belady_oracle``) cannot serve live traffic and are refused before
vLLM starts, as are unknown or broken policies and bad options.

Two guards vLLM lacks:

* :class:`TokenIdGuard`, an ASGI middleware (vLLM's ``--middleware``) added
  under ``--skip-tokenizer-init``: vLLM checks prompt token ids against the
  vocabulary only through its tokenizer, so without one an id >= the
  vocabulary size reached the model's embedding, killed the engine and with
  it the server. The guard answers such a request HTTP 400 instead.
* vLLM's server runs in a child process, and ``spfcore serve`` watches it:
  SIGTERM / SIGINT are passed on, and a server that stops without being
  asked (its engine died: vLLM then shuts the HTTP server down and exits 0)
  makes ``spfcore serve`` exit 1, so a supervisor notices.
"""

from __future__ import annotations

import atexit
import json
import math
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import click

from spfcore import registry

#: What vLLM's EngineCore builds as its scheduler (see module docstring).
SCHEDULER = "spfcore.engine.vllm_adapter.policy_scheduler"


def check_policy(name: str, options: dict[str, str]) -> registry.PolicyInfo:
    """Check that policy ``name`` with ``options`` can serve live traffic.

    Builds the policy once on a 2-block cache (its constructor and
    ``spfcore_cache_configured`` run), as ``spfcore gate`` does before an engine starts.

    Returns:
        The policy's :class:`~spfcore.registry.PolicyInfo`.

    Raises:
        spfcore.registry.PolicyConfigError: unknown, disallowed or broken
            policy; a policy that needs the future; bad option.
        spfcore.runtime.PolicyError: the policy fails while being built.
    """
    from spfcore.runtime import PolicyRuntime

    info = registry.get(name)
    if "needs-future" in info.capabilities:
        raise registry.PolicyConfigError(
            f"policy {name!r} ({info.distribution} {info.version}) needs the future request stream "
            "(capability needs-future): a live server has none. Judge it offline with "
            "`spfcore simulate` or `spfcore gate`; serve a policy without needs-future.")
    PolicyRuntime.for_policy(name, 2, 1, options)
    return info


def parse_policy_options(name: str, items) -> dict[str, str]:
    """``KEY=VALUE`` (or ``NAME.KEY=VALUE`` with NAME the served policy)
    strings into ``{KEY: VALUE}``.

    Raises:
        spfcore.registry.PolicyConfigError: no ``=``, or another policy's NAME.
    """
    out: dict[str, str] = {}
    for item in items:
        lhs, eq, value = item.partition("=")
        if not eq or not lhs.strip():
            raise registry.PolicyConfigError(f"bad --policy-opt {item!r}: expected KEY=VALUE")
        pol, dot, key = lhs.partition(".")
        if dot:
            if pol.strip() != name:
                raise registry.PolicyConfigError(f"bad --policy-opt {item!r}: serving policy {name!r}, "
                                                 f"not {pol.strip()!r}")
        else:
            key = lhs
        out[key.strip()] = value.strip()
    return out


def _given(argv, flag: str) -> bool:
    """Whether vLLM option ``flag`` (``--name``) is in ``argv`` (either
    spelling: vLLM accepts ``--a-b`` and ``--a_b``, ``--x y`` and ``--x=y``)."""
    forms = {flag, flag.replace("-", "_").replace("__", "--", 1)}
    return any(a.split("=", 1)[0] in forms for a in argv)


def _vllm_parser():
    """vLLM's ``vllm serve`` argument parser (module moved between vLLM 0.24 and 0.32)."""
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older vLLM
        from vllm.utils import FlexibleArgumentParser
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    except ImportError:  # vLLM 0.24
        from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    return make_arg_parser(FlexibleArgumentParser(prog="spfcore serve [MODEL] --policy NAME")), \
        validate_parsed_serve_args


def build_args(model: str | None, policy: str, options: dict[str, str], vllm_argv: list[str]):
    """vLLM's parsed serve arguments for ``spfcore serve``.

    Args:
        model: Preset name, model folder or hub name; ``None``: the
            ``tiny`` preset unless ``--model`` is among ``vllm_argv``.
        policy, options: The checked policy and its string options.
        vllm_argv: Further ``vllm serve`` options, verbatim.

    Returns:
        The ``argparse.Namespace`` vLLM's serve entry point takes.

    Raises:
        click.UsageError: ``--scheduler-cls`` given (spfcore sets it), or
            vLLM's parser refuses an option.
    """
    from spfcore.engine.presets import PRESETS, model_config, resolve_model

    parser, validate = _vllm_parser()
    if _given(vllm_argv, "--scheduler-cls"):
        raise click.UsageError("--scheduler-cls is set by spfcore serve (the policy scheduler); leave it out")

    def parse(argv):
        try:
            return parser.parse_args(argv)
        except SystemExit as exc:
            raise click.UsageError(f"vLLM refused the server options {vllm_argv!r} (see above)") from exc

    if model is None and _given(vllm_argv, "--model"):
        model = parse(list(vllm_argv)).model
    defaults: list[str] = []
    name = model
    if model is None or model in PRESETS:
        name, load_format = resolve_model(model)
        defaults = ["--load-format", load_format, "--skip-tokenizer-init"]
        from vllm.platforms import current_platform

        if current_platform.is_cpu():  # what `spfcore gate` uses there (docs/design.md section 5)
            defaults += ["--enforce-eager", "--block-size", "32", "--gpu-memory-utilization", "0.1"]
    args = parse([*defaults, *vllm_argv])
    late = getattr(args, "model_tag", None)  # vLLM 0.32's parser takes a positional model; 0.24's does not
    if late is not None:
        raise click.UsageError(f"unexpected argument {late!r}: give MODEL first, before any option")
    args.model_tag, args.model = None, name
    blocks, bs = getattr(args, "num_gpu_blocks_override", None), getattr(args, "block_size", None)
    if blocks and bs and not _given(vllm_argv, "--max-model-len") and (model is None or model in PRESETS):
        # as the engine runner: vLLM refuses a max_model_len the whole cache cannot hold
        args.max_model_len = min(int(model_config(model).get("max_position_embeddings", 4096)), (blocks - 1) * bs)
    if getattr(args, "skip_tokenizer_init", False):
        args.middleware = [*(getattr(args, "middleware", None) or []), GUARD]
    extra = dict(getattr(args, "additional_config", None) or {})
    extra["spfcore"] = {"policy": policy, "options": dict(options), "metrics": True}
    args.additional_config = extra
    args.scheduler_cls = SCHEDULER
    validate(args)
    return args


#: Import path of :class:`TokenIdGuard` for vLLM's ``--middleware``.
GUARD = "spfcore.serve.TokenIdGuard"

#: Top-level request fields that may carry prompt token ids (``/v1/completions``:
#: ``prompt``, one list of ids or a list of them; vLLM's token-in endpoints).
TOKEN_FIELDS = ("prompt", "prompt_token_ids", "token_ids")


def out_of_vocabulary(payload, vocab_size: int) -> tuple[str, int] | None:
    """The first token id outside ``[0, vocab_size)`` in a request's JSON.

    Args:
        payload: The parsed request body (anything: only a dict's
            :data:`TOKEN_FIELDS` holding a list of ints, or a list of such
            lists, are looked at; text prompts are not).
        vocab_size: The model's vocabulary size (token ids).

    Returns:
        ``(field, id)`` of the first bad id, or ``None``.
    """
    if not isinstance(payload, dict):
        return None
    for field in TOKEN_FIELDS:
        value = payload.get(field)
        if not isinstance(value, list):
            continue
        rows = value if value and all(isinstance(v, list) for v in value) else [value]
        for row in rows:
            for tok in row:
                if isinstance(tok, bool) or not isinstance(tok, (int, float)):
                    continue  # not a token id: vLLM's own validation answers it
                # a JSON number with a fraction or exponent (32000.0, 1e10) is cast to int by vLLM
                if not (math.isfinite(tok) and 0 <= tok < vocab_size):
                    return field, tok
    return None


class TokenIdGuard:
    """ASGI middleware: HTTP 400 for a prompt token id outside the model's
    vocabulary, when vLLM runs without a tokenizer (``--skip-tokenizer-init``).

    vLLM validates prompt token ids only against its tokenizer; without one
    an out-of-vocabulary id reaches the embedding lookup and the engine dies
    (the request gets HTTP 500, then the server exits). This middleware
    reads the body of each POST (any path), checks :data:`TOKEN_FIELDS` with
    :func:`out_of_vocabulary` against ``model_config.get_vocab_size()`` of
    the app's ``state.vllm_config``, and answers a bad request in vLLM's
    error format (``{"error": {"message", "type": "BadRequestError",
    "param", "code": 400}}``); every other request goes on unchanged (its
    body replayed). Nothing is checked while vLLM has a tokenizer.

    Args:
        app: The ASGI application it wraps (vLLM adds it with
            ``app.add_middleware`` for ``--middleware spfcore.serve.TokenIdGuard``).
    """

    def __init__(self, app) -> None:
        self.app = app
        self._vocab: int | None | bool = False  # False: not looked up yet

    def _vocab_size(self, scope) -> int | None:
        """The vocabulary size to check against, or ``None`` (a tokenizer is loaded)."""
        if self._vocab is False:
            try:
                mc = scope["app"].state.vllm_config.model_config
                self._vocab = int(mc.get_vocab_size()) if mc.skip_tokenizer_init else None
            except Exception as exc:  # noqa: BLE001 - another vLLM layout: say so once, check nothing
                self._vocab = None
                logging.getLogger(__name__).warning(
                    "spfcore serve: prompt token ids are not checked (vLLM's model config not found: %r)", exc)
        return self._vocab

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or self._vocab_size(scope) is None:
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            bad = out_of_vocabulary(json.loads(body), self._vocab)
        except ValueError:  # not JSON: vLLM answers it
            bad = None
        if bad is not None:
            field, tok = bad
            err = {"error": {"message": f"Token id {tok} in '{field}' is out of vocabulary: the model has "
                                        f"{self._vocab} token ids (0..{self._vocab - 1}). Refused by spfcore "
                                        "serve (vLLM checks ids only through a tokenizer, and this server "
                                        "runs with --skip-tokenizer-init).",
                             "type": "BadRequestError", "param": field, "code": 400}}
            data = json.dumps(err).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(data)).encode())]})
            await send({"type": "http.response.body", "body": data})
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _metrics_dir() -> None:
    """Set ``PROMETHEUS_MULTIPROC_DIR`` to a fresh folder removed at exit
    (unless set): prometheus-client picks its multiprocess mode at import."""
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        return
    if "prometheus_client" in sys.modules:  # pragma: no cover - only if imported before the command
        click.echo("spfcore serve: prometheus_client was imported before PROMETHEUS_MULTIPROC_DIR could be "
                   "set; policy metrics will be missing from /metrics", err=True)
    d = tempfile.mkdtemp(prefix="spfcore-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = d
    atexit.register(shutil.rmtree, d, True)


@click.command("serve", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True},
               epilog="Any other option is vLLM's (`python -m vllm.entrypoints.openai.api_server --help` "
                      "lists them), e.g. --port 8000 --max-num-seqs 8 --num-gpu-blocks-override 512.")
@click.option("--policy", required=True, help="Installed policy to order evictions (spfcore list-policies).")
@click.option("--policy-opt", "policy_opts", multiple=True, metavar="KEY=VALUE",
              help="A policy parameter (spfcore describe NAME lists them; repeatable).")
@click.argument("vllm_args", nargs=-1, type=click.UNPROCESSED)
def serve(policy: str, policy_opts: tuple[str, ...], vllm_args: tuple[str, ...]) -> None:
    """Run vLLM's OpenAI-compatible server with POLICY ordering the prefix
    cache's evictions: spfcore serve [MODEL] --policy NAME [--policy-opt K=V]
    [vLLM options]. MODEL: a preset (tiny, the default; llama-3.2-3b: random
    weights, token-id prompts), a model folder, or any name vLLM loads.

    Look for the start-up line `spfcore policy NAME (DIST VERSION) params {...}`
    and the spfcore_* series on the server's /metrics."""
    try:
        options = parse_policy_options(policy, policy_opts)
        check_policy(policy, options)
    except registry.PolicyConfigError as exc:  # a bad --policy / --policy-opt: a usage error (exit status 2)
        raise click.UsageError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - PolicyError: the plugin fails while being built
        raise click.ClickException(f"policy {policy!r} cannot start: {exc}") from None
    _metrics_dir()
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")  # as `vllm serve` (cli_env_setup)
    sys.exit(supervise([sys.executable, "-c", "import sys; from spfcore.serve import _server; sys.exit(_server())",
                        json.dumps({"policy": policy, "options": options, "argv": list(vllm_args)})]))


#: Seconds a child that was passed SIGTERM / SIGINT has to stop before it is
#: killed (vLLM still starting up, e.g. loading the model, does not always act
#: on SIGTERM).
STOP_GRACE_S = 20.0


def supervise(cmd: list[str], grace_s: float = STOP_GRACE_S) -> int:
    """Run vLLM's server (``cmd``) as a child process until it exits.

    SIGTERM and SIGINT sent to this process are passed on to the child; a
    child still running ``grace_s`` seconds after that is killed (SIGKILL,
    said on stderr). On Linux the child also gets SIGTERM if this process dies.

    Returns:
        The exit status for ``spfcore serve``: the child's when non-zero
        (128 + N when killed by signal N); 0 when it stopped cleanly after a
        SIGTERM / SIGINT; 1 when it stopped by itself (vLLM's server exits 0
        when its engine dies), with a line on stderr saying so.
    """
    asked: list[int] = []
    child = subprocess.Popen(cmd, preexec_fn=_stop_with_parent)

    def forward(signum, _frame) -> None:
        asked.append(signum)
        if child.poll() is None:
            child.send_signal(signum)

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        first = killed = None
        while True:
            try:
                rc = child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if asked and first is None:
                    first = time.monotonic()
                if first is not None and not killed and time.monotonic() - first > grace_s:
                    click.echo(f"spfcore serve: vLLM's server did not stop within {grace_s:g} s of the "
                               "signal; killing it", err=True)
                    child.kill()
                    killed = True
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if rc < 0:
        rc = 128 - rc
    if rc == 0 and not asked:
        click.echo("spfcore serve: vLLM's server stopped without being asked to (its engine died? see the "
                   "log above); exit status 1", err=True)
        return 1
    return rc


def _stop_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``), so that a SIGKILLed ``spfcore serve`` does
    not leave its server running; elsewhere nothing."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _server() -> int:
    """The child process of :func:`serve`: vLLM's server with the policy
    (JSON ``{"policy", "options", "argv"}`` in ``sys.argv[1]``). Returns the
    exit status (2: vLLM refused an option)."""
    spec = json.loads(sys.argv[1])
    argv = list(spec["argv"])
    model = argv.pop(0) if argv and not argv[0].startswith("-") else None
    try:
        args = build_args(model, spec["policy"], spec["options"], argv)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except ValueError as exc:
        click.echo(f"Error: {exc}", err=True)
        return 1
    from vllm.entrypoints.cli.serve import ServeSubcommand

    ServeSubcommand.cmd(args)
    return 0
