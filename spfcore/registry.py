"""Policy discovery, validation and construction.

A policy is a class published under the entry-point group
``spfcore.policies`` (entry-point name = policy name). The class carries:

* ``name`` (str), equal to the entry-point name;
* ``capabilities``: a set drawn from :data:`CAPABILITIES`;
* ``Params``: an attrs class of parameters with defaults and validators;
* ``contract`` (optional, recommended): the contract version the plugin was
  written for, e.g. ``"1.0"`` (see :mod:`spfcore.contract`); an incompatible
  one is listed as an error with the reason;
* ``__init__(self, params)`` and pluggy hook implementations marked with
  :data:`spfcore.hookimpl` (see :mod:`spfcore.hookspecs`).

``SPFCORE_POLICIES`` (allowlist) and ``SPFCORE_DISABLE_POLICIES``
(blocklist) hold comma-separated names. A policy that fails to import or
validate is listed with ``status = "error: <reason>"``; it never breaks
listing or a run that does not select it.

Discovery runs once per process: the entry points are read once per
``sys.path`` and each plugin is loaded and validated once (both cached);
the allow/block lists are applied on every call. :func:`refresh` forgets
the cache (after installing a plugin in a running process).
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import re
import typing
from importlib.metadata import EntryPoint, entry_points

import attrs
import docstring_parser
import pluggy

from spfcore import contract as _contract
from spfcore import hookspecs
from spfcore.hookspecs import PROJECT

#: The distribution whose policies are built in (their names are reserved).
BUILTIN_DIST = "spfcore"

GROUP = "spfcore.policies"
CAPABILITIES = frozenset({"needs-future", "admission", "sessions", "prefetch", "scoring", "pins", "ordered",
                          "keys-only", "chain-only"})
#: Class attributes every policy class has (``contract`` is optional).
REQUIRED_ATTRIBUTES = ("name", "capabilities", "Params")


class PolicyConfigError(ValueError):
    """Unknown policy, unknown parameter or bad parameter value (one line)."""


@attrs.frozen
class PolicyInfo:
    """What ``spfcore list-policies`` shows about one installed policy."""

    name: str
    distribution: str
    version: str
    entry_point: str
    status: str  # "ok" or "error: <reason>"
    hooks: tuple = ()
    capabilities: tuple = ()
    parameters: tuple = ()  # ({"name", "type", "default", "doc"}, ...)
    summary: str = ""
    doc: str = ""
    contract: str | None = None  # the contract version the plugin declares (None: undeclared)
    homepage: str | None = None  # the distribution's home page (metadata Home-page / Project-URL)
    cls: type | None = attrs.field(default=None, repr=False, eq=False)

    def to_json(self) -> dict:
        d = attrs.asdict(self, recurse=False, filter=lambda a, v: a.name != "cls")
        d["hooks"], d["capabilities"] = list(self.hooks), list(self.capabilities)
        d["parameters"] = [{**p, "default": _jsonable(p["default"])} for p in self.parameters]
        return d


def _jsonable(v):
    """Parameter defaults for strict JSON: non-finite floats as strings ("inf")."""
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return str(v)
    return v


def _names(var: str, env) -> set[str] | None:
    raw = env.get(var)
    if raw is None or not raw.strip():
        return None
    return {n.strip() for n in raw.split(",") if n.strip()}


def allowlist(env: typing.Mapping[str, str] | None = None) -> set[str] | None:
    """The names in ``SPFCORE_POLICIES`` (``env``, default ``os.environ``), or
    ``None`` when it is unset or blank (no allowlist)."""
    return _names("SPFCORE_POLICIES", os.environ if env is None else env)


def new_plugin_manager() -> pluggy.PluginManager:
    """A PluginManager that knows spfcore's hook specs and nothing else."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def _params_of(cls) -> tuple:
    params = getattr(cls, "Params", None)
    if params is None or not attrs.has(params):
        raise TypeError("policy class has no attrs class 'Params'")
    hints = typing.get_type_hints(params)
    docs = {a.arg_name: " ".join((a.description or "").split())
            for a in docstring_parser.parse(params.__doc__ or "").params}
    out = []
    for f in attrs.fields(params):
        default = f.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            default = default.factory()
        t = hints.get(f.name, f.type)
        if typing.get_origin(t) is typing.Literal:  # the allowed values, e.g. one of 'utility' | 'seed'
            name = "one of " + " | ".join(repr(a) for a in typing.get_args(t))
        else:
            name = getattr(t, "__name__", str(t))
        out.append({"name": f.name, "type": name, "default": default, "doc": docs.get(f.name, "")})
    return tuple(out)


def _validate(cls) -> tuple[tuple, tuple]:
    """Check a policy class against the contract; return (hooks, capabilities).

    Raises:
        Exception: any violation (pluggy.PluginValidationError, TypeError, ...).
    """
    if not inspect.isclass(cls):
        raise TypeError(f"entry point must name a policy class, got {type(cls).__name__}")
    for attr in REQUIRED_ATTRIBUTES:
        if not hasattr(cls, attr):
            raise TypeError(f"policy class lacks attribute {attr!r}")
    if not isinstance(cls.name, str):
        raise TypeError(f"policy class attribute 'name' must be a str, got {type(cls.name).__name__}")
    unknown = set(cls.capabilities) - CAPABILITIES
    if unknown:
        raise TypeError(f"unknown capabilities {sorted(unknown)}")
    if not attrs.has(cls.Params):
        raise TypeError("policy class attribute 'Params' is not an attrs class")
    why = _contract.incompatibility(getattr(cls, "contract", None))
    if why is not None:
        raise TypeError(f"incompatible contract: {why}")
    try:
        defaults = cls.Params()
    except (Exception, SystemExit) as exc:
        raise TypeError(f"Params() cannot be built with its defaults: {type(exc).__name__}: {exc}") from exc
    try:
        instance = cls(defaults)
    except (Exception, SystemExit) as exc:
        raise TypeError(f"the policy cannot be built with default Params: {exc!r}") from exc
    if not hasattr(instance, "params"):  # the runtime reads instance.params (pin_cap_fraction)
        raise TypeError("policy instance has no attribute 'params' after construction "
                        "(set self.params = params in __init__)")
    pm = new_plugin_manager()
    pm.register(instance, name=cls.name)
    pm.check_pending()  # hookimpls that match no hookspec
    hooks = tuple(sorted(h.name for h in pm.get_hookcallers(instance) or ()))
    mixed = {"spfcore_score_blocks", "spfcore_admit_blocks", "spfcore_choose_victims"}.intersection(hooks)
    if "spfcore_evict_blocks" in hooks and mixed:
        raise TypeError(f"spfcore_evict_blocks (policy-ordered mode) excludes {sorted(mixed)}: implement one mode")
    why = _contract.newer_than_declared(getattr(cls, "contract", None), cls.capabilities, hooks)
    if why is not None:
        raise TypeError(f"incompatible contract: {why}")
    return hooks, tuple(sorted(cls.capabilities))


def _info_from(ep: EntryPoint, refused: str | None = None) -> PolicyInfo:
    """Load and validate the policy of ``ep``; ``refused``: list it with that
    error status without loading it."""
    dist = ep.dist
    base = dict(name=ep.name, distribution=_dist_name(ep), version=dist.version if dist is not None else "?",
                entry_point=ep.value, homepage=_homepage(dist))
    if refused is not None:
        return PolicyInfo(status=f"error: {refused}", **base)
    try:
        cls = ep.load()
        if getattr(cls, "name", ep.name) != ep.name:
            raise TypeError(f"class name {cls.name!r} differs from entry-point name {ep.name!r}")
        hooks, caps = _validate(cls)
        params = _params_of(cls)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a broken plugin (even one calling sys.exit) is listed, never fatal
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return PolicyInfo(status=f"error: {reason}", **base)
    doc = inspect.getdoc(cls) or ""
    return PolicyInfo(status="ok", hooks=hooks, capabilities=caps, parameters=params,
                      summary=" ".join(doc.split("\n\n")[0].split()), doc=doc,
                      contract=getattr(cls, "contract", None), cls=cls, **base)


def _homepage(dist) -> str | None:
    """The distribution's home page: metadata ``Home-page``, else the
    ``Project-URL`` labelled homepage/home/source/repository (case and
    punctuation ignored), else ``None``."""
    if dist is None:
        return None
    meta = dist.metadata
    if meta.get("Home-page"):
        return meta["Home-page"]
    urls = {}
    for entry in meta.get_all("Project-URL") or ():
        label, _, url = entry.partition(",")
        urls[re.sub(r"[^a-z]", "", label.lower())] = url.strip()
    return next((urls[k] for k in ("homepage", "home", "source", "repository") if k in urls), None)


def _dist_name(ep: EntryPoint) -> str:
    return ep.dist.metadata["Name"] if ep.dist is not None else "?"


@functools.lru_cache(maxsize=None)
def _entry_points(path: tuple) -> tuple:
    """The group's entry points as ``(ep, distribution name)``, read once per ``sys.path`` (``path``)."""
    return tuple((ep, _dist_name(ep)) for ep in entry_points(group=GROUP))


@functools.lru_cache(maxsize=None)
def _cached_info(ep: EntryPoint, where: str, refused: str | None) -> PolicyInfo:
    """:func:`_info_from`, once per entry point (``where``: its distribution's folder, so two
    distributions of one name in two folders stay apart)."""
    return _info_from(ep, refused)


def refresh() -> None:
    """Forget the discovery cache: the next :func:`discover` reads the entry points and loads
    the plugins again (a plugin installed while this process runs)."""
    _entry_points.cache_clear()
    _cached_info.cache_clear()


def _info(ep: EntryPoint, refused: str | None = None) -> PolicyInfo:
    return _cached_info(ep, str(getattr(ep.dist, "_path", "")), refused)


def discover(env: typing.Mapping[str, str] | None = None) -> list[PolicyInfo]:
    """Every installed policy allowed by the allow/block lists, sorted by name.

    A name is claimed once: when another distribution also publishes a
    built-in name (one of spfcore's own, e.g. ``lru``), the built-in stays
    and the other entry point is listed with an error status; when two
    third-party distributions claim one name, both are listed with an error
    (uninstall one), so a baseline can never be replaced silently.

    Args:
        env: Environment to read ``SPFCORE_POLICIES`` / ``SPFCORE_DISABLE_POLICIES``
            from (default ``os.environ``).
    """
    env = os.environ if env is None else env
    allow, deny = _names("SPFCORE_POLICIES", env), _names("SPFCORE_DISABLE_POLICIES", env) or set()
    claims: dict[str, dict[tuple, EntryPoint]] = {}
    for ep, dist in _entry_points(tuple(sys.path)):
        if (allow is not None and ep.name not in allow) or ep.name in deny:
            continue
        claims.setdefault(ep.name, {}).setdefault((dist, ep.value), ep)  # same dist twice: once
    out = []
    for name, by_dist in claims.items():
        eps = list(by_dist.values())
        if len(eps) == 1:
            out.append(_info(eps[0]))
            continue
        # the distribution names read once per sys.path (_entry_points), not each entry point's metadata again
        builtin = [ep for (dist, _), ep in by_dist.items() if dist == BUILTIN_DIST]
        if builtin:
            out.append(_info(builtin[0]))
            why = f"name {name!r} belongs to the built-in policy ({BUILTIN_DIST}); this entry point is ignored"
            rivals = [ep for ep in eps if ep is not builtin[0]]
        else:
            dists = ", ".join(sorted(dist for dist, _ in by_dist))
            why = f"name {name!r} is claimed by several distributions ({dists}); uninstall all but one"
            rivals = eps
        out.extend(_info(ep, refused=why) for ep in rivals)
    return sorted(out, key=lambda p: (p.name, p.status != "ok", p.distribution))


def by_name(env: typing.Mapping[str, str] | None = None) -> dict[str, PolicyInfo]:
    """:func:`discover` as ``{name: info}``, the usable entry of each name."""
    infos: dict[str, PolicyInfo] = {}
    for p in discover(env):  # sorted: the usable entry of a name comes first
        infos.setdefault(p.name, p)
    return infos


def get(name: str, env: typing.Mapping[str, str] | None = None) -> PolicyInfo:
    """The installed, allowed, working policy ``name``.

    Raises:
        PolicyConfigError: if it is not installed, not allowed, broken, or
            its name is claimed by several third-party distributions.
    """
    infos = by_name(env)
    if name not in infos:
        avail = ", ".join(sorted(n for n, p in infos.items() if p.status == "ok")) or "none"
        raise PolicyConfigError(f"policy {name!r} is not installed or not allowed (available: {avail})")
    info = infos[name]
    if info.status != "ok":
        raise PolicyConfigError(f"policy {name!r} cannot be used: {info.status}")
    return info


def _convert(policy: str, field: attrs.Attribute, typ, raw: str):
    tname = getattr(typ, "__name__", str(typ))
    try:
        if typ is bool:
            low = raw.strip().lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return low in ("true", "1", "yes")
        if typ in (int, float, str):
            return typ(raw)
        if typing.get_origin(typ) is typing.Literal:
            if raw not in typing.get_args(typ):
                raise ValueError
            return raw
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if args and raw.lower() == "none":
            return None
        for a in args:
            try:
                return a(raw)
            except (TypeError, ValueError):
                continue
        raise ValueError
    except ValueError:
        allowed = f"one of {list(typing.get_args(typ))}" if typing.get_origin(typ) is typing.Literal else f"a {tname}"
        raise PolicyConfigError(f"policy {policy!r}: bad value {raw!r} for {field.name!r} (must be {allowed})") from None


def parse_options(items: typing.Iterable[str]) -> dict[str, dict[str, str]]:
    """Parse ``NAME.KEY=VALUE`` strings into ``{NAME: {KEY: VALUE}}``.

    Raises:
        PolicyConfigError: on a string without ``.`` or ``=``.
    """
    out: dict[str, dict[str, str]] = {}
    for item in items:
        lhs, eq, value = item.partition("=")
        name, dot, key = lhs.partition(".")
        if not eq or not dot or not name or not key:
            raise PolicyConfigError(f"bad --policy-opt {item!r}: expected NAME.KEY=VALUE")
        out.setdefault(name.strip(), {})[key.strip()] = value.strip()
    return out


def check_options(arms: typing.Iterable[str], options: typing.Mapping[str, typing.Mapping[str, str]]) -> None:
    """Check a run's ``--policy-opt`` values before any cell runs: every
    option names an arm of the run and builds that arm's ``Params``. An arm
    that is not installed (or broken) is skipped: its cells say why.

    Raises:
        PolicyConfigError: options for an arm not in ``arms``, an unknown key
            or a bad value (the message names the policy and the field).
    """
    unknown = set(options) - set(arms)
    if unknown:
        raise PolicyConfigError(f"options for arms not run: {sorted(unknown)}")
    for arm, opts in options.items():
        try:
            info = get(arm)
        except PolicyConfigError:
            continue
        make_params(info, opts)


def make_params(info: PolicyInfo, options: typing.Mapping[str, str] | None = None):
    """Build ``info.cls.Params`` from string options.

    Raises:
        PolicyConfigError: unknown key or bad value, naming policy, key and what is allowed.
    """
    cls = info.cls.Params
    fields = {f.name: f for f in attrs.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, raw in (options or {}).items():
        if key not in fields:
            raise PolicyConfigError(f"policy {info.name!r}: unknown parameter {key!r} "
                                    f"(allowed: {', '.join(fields) or 'none'})")
        kwargs[key] = _convert(info.name, fields[key], hints.get(key, str), raw)
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        # attrs' validators raise with (message, attribute, ...): str() of that is a tuple's repr
        msg = exc.args[0] if len(exc.args) > 1 and isinstance(exc.args[0], str) else str(exc)
        raise PolicyConfigError(f"policy {info.name!r}: {msg.splitlines()[0] if msg else type(exc).__name__}") from None


def plugin_manager(info: PolicyInfo, options: typing.Mapping[str, str] | None = None):
    """A fresh PluginManager holding a new instance of the policy.

    Returns:
        (pm, instance).

    Raises:
        PolicyConfigError: unknown key or bad value of an option.
        spfcore.runtime.PolicyError: the policy's constructor raised (hook
            ``__init__``) or left no ``params`` attribute.
    """
    from spfcore.runtime import PolicyError

    params = make_params(info, options)
    try:
        instance = info.cls(params)
    except (Exception, SystemExit) as exc:
        raise PolicyError(f"policy {info.name!r} failed in hook __init__: {exc!r}",
                          policy=info.name, hook="__init__") from exc
    if not hasattr(instance, "params"):
        raise PolicyError(f"policy {info.name!r}: __init__ left no attribute 'params'",
                          policy=info.name, hook="__init__")
    pm = new_plugin_manager()
    pm.register(instance, name=info.name)
    where = os.environ.get(TRACE_ENV, "").strip()
    if where and where != "0":
        trace_hooks(pm, info.name, None if where in ("1", "-", "stderr") else where)
    return pm, instance


#: ``SPFCORE_TRACE_HOOKS=1`` (or ``-``/``stderr``): every hook call of every policy built by
#: :func:`plugin_manager` is written to stderr, one line each; ``=PATH``: appended to that file.
TRACE_ENV = "SPFCORE_TRACE_HOOKS"


def _brief(v) -> str:
    """A short text of a hook argument or result: sizes of batches and sequences, not their contents."""
    if v is None or isinstance(v, (bool, int, float)):
        return repr(v)
    n = getattr(v, "ids", None)
    if n is not None:
        return f"<{len(n)} blocks>"
    if isinstance(v, (list, tuple, set, frozenset, dict)):
        return f"<{type(v).__name__} of {len(v)}>"
    rid = getattr(v, "request_id", None)
    return f"<request {rid}>" if rid is not None else f"<{type(v).__name__}>"


def trace_hooks(pm: pluggy.PluginManager, policy: str, path: str | None = None):
    """Write one line per hook call of ``pm`` (pluggy's hook-call monitoring):
    ``spfcore-hook POLICY HOOK arg=... -> result (µs)``, arguments and result
    abbreviated (:func:`_brief`), to stderr or appended to ``path``.

    Returns:
        The function that stops the tracing.
    """
    import time

    started: list[float] = []

    def before(hook_name, hook_impls, kwargs):
        started.append(time.perf_counter())

    def after(outcome, hook_name, hook_impls, kwargs):
        us = 1e6 * (time.perf_counter() - started.pop()) if started else float("nan")
        try:
            res = _brief(outcome.get_result())
        except BaseException as exc:  # noqa: BLE001 - the hook raised: the runtime reports it
            res = f"raised {type(exc).__name__}"
        args = " ".join(f"{k}={_brief(v)}" for k, v in kwargs.items())
        line = f"spfcore-hook {policy} {hook_name} {args} -> {res} ({us:.0f} us)\n"
        if path is None:
            sys.stderr.write(line)
        else:
            with open(path, "a", encoding="utf-8") as f:
                f.write(line)

    return pm.add_hookcall_monitoring(before, after)
