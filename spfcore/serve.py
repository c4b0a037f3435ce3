"""``spfcore serve``: vLLM's own OpenAI-compatible server with a policy in its scheduler.

Nothing here is a server: the command checks the policy, builds vLLM's own
``vllm serve`` arguments (vLLM's argument parser, every option it knows) and
runs vLLM's serve entry point in this process. What spfcore adds:

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
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

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
    extra = dict(getattr(args, "additional_config", None) or {})
    extra["spfcore"] = {"policy": policy, "options": dict(options), "metrics": True}
    args.additional_config = extra
    args.scheduler_cls = SCHEDULER
    validate(args)
    return args


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
    except registry.PolicyConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - PolicyError: the plugin fails while being built
        raise click.ClickException(f"policy {policy!r} cannot start: {exc}") from None
    argv = list(vllm_args)
    model = argv.pop(0) if argv and not argv[0].startswith("-") else None
    _metrics_dir()
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")  # as `vllm serve` (cli_env_setup)
    try:
        args = build_args(model, policy, options, argv)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    from vllm.entrypoints.cli.serve import ServeSubcommand

    ServeSubcommand.cmd(args)
