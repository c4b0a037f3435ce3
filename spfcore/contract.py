"""The versioned policy contract: what a plugin may rely on, with a version.

The contract is the hook specs (:mod:`spfcore.hookspecs`: names, argument
names, ``firstresult``), the views a policy reads and the answers it gives
(:mod:`spfcore.views`: :class:`~spfcore.views.BlockBatch` columns, the fields
of ``BlockView``, ``RequestView``, ``Score``, ``Scores``, ``Hint``) and the
class attributes the registry reads (``name``, ``capabilities``, ``Params``,
``contract``; :data:`spfcore.registry.CAPABILITIES`).

:data:`CONTRACT_VERSION` is a semantic version ``MAJOR.MINOR.PATCH``:

* MAJOR changes when a plugin written for the old contract can break (a hook
  removed or renamed, an argument or a column removed, an answer form
  refused);
* MINOR when something is added that old plugins do not use (a new hook, a
  new column, a new capability);
* PATCH for documentation-only changes.

A plugin declares the contract it was written for as a class attribute,
``contract = "1.0"`` (``MAJOR.MINOR``, or a full ``MAJOR.MINOR.PATCH``). The
registry refuses (lists with ``status: error: ...``) a plugin whose major
differs from this core's, that needs a newer minor than this core has, or
that uses a capability or hook of a later contract than it declares
(:data:`INTRODUCED`; e.g. ``keys-only`` under ``contract = "1.0"``). A
plugin without ``contract`` is still loaded (it predates the versioned
contract) and is listed with ``contract: null``; the conformance kit
(:mod:`spfcore.conformance`) asks for the declaration.

:data:`CONTRACT_DIGEST` is the digest (:func:`contract_digest`) of the
contract's shape recorded beside the version: a test fails when the shape
changes and the two are not updated together.
"""

from __future__ import annotations

import hashlib
import inspect
import re

import attrs

#: The contract version this core implements (semver).
CONTRACT_VERSION = "1.4.0"

#: :func:`contract_digest` of the contract at :data:`CONTRACT_VERSION`. Changing
#: hooks, columns or answer fields changes the digest: then bump the version
#: (see the module doc for which part) and record the new digest here.
CONTRACT_DIGEST = "92459c31cdc8626d"

_VERSION = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)(?:\.(0|[1-9]\d*))?")


def parse(version: str) -> tuple[int, int, int]:
    """``"MAJOR.MINOR[.PATCH]"`` -> ``(major, minor, patch)``.

    Raises:
        ValueError: not a string of that form (the message quotes it).
    """
    m = _VERSION.fullmatch(version) if isinstance(version, str) else None  # ($ alone lets "1.0\n" through)
    if m is None:
        raise ValueError(f"contract version {version!r} is not MAJOR.MINOR or MAJOR.MINOR.PATCH (e.g. '1.0')")
    return int(m[1]), int(m[2]), int(m[3] or 0)


def incompatibility(declared, core: str = CONTRACT_VERSION) -> str | None:
    """Why a plugin written for contract ``declared`` cannot run on a core
    implementing ``core``, or ``None`` when it can (same major, declared
    minor <= core's minor; patch levels never matter).

    Args:
        declared: The plugin's ``contract`` attribute (``None``: undeclared, accepted).
        core: The core's contract version.
    """
    if declared is None:
        return None
    try:
        major, minor, _ = parse(declared)
    except ValueError as exc:
        return str(exc)
    cmaj, cmin, _ = parse(core)
    if major != cmaj:
        return (f"written for contract {declared}, this spfcore implements contract {core} "
                f"(major versions differ: install a spfcore whose contract is {major}.x)")
    if minor > cmin:
        return (f"written for contract {declared}, newer than this spfcore's contract {core} "
                "(upgrade spfcore)")
    return None


#: The contract version that introduced each capability and hook added after 1.0
#: (``"capability <name>"`` / ``"hook <name>"`` -> ``(major, minor)``). A plugin that declares an
#: older contract cannot rely on them (an older core refuses the capability by name, or never
#: calls the hook), so :func:`newer_than_declared` names the mismatch.
INTRODUCED = {
    "hook spfcore_evict_blocks": (1, 1), "capability ordered": (1, 1),
    "hook spfcore_tier_admit": (1, 2), "hook spfcore_tier_score": (1, 2),
    "capability keys-only": (1, 3), "capability chain-only": (1, 4),
}


def newer_than_declared(declared, capabilities, hooks) -> str | None:
    """Why a plugin declaring contract ``declared`` uses a capability or
    implements a hook introduced by a later contract, or ``None``.

    Args:
        declared: The plugin's ``contract`` attribute (``None``: undeclared,
            nothing to compare; an unparsable one is :func:`incompatibility`'s
            to report).
        capabilities: The class's capability names.
        hooks: The hook names it implements.

    Returns:
        One line naming the first such capability or hook (sorted) and the
        contract it needs, e.g. ``"capability 'keys-only' is part of contract
        1.3, the policy declares 1.0 (declare contract = \"1.3\")"``.
    """
    if declared is None:
        return None
    try:
        mine = parse(declared)[:2]
    except ValueError:
        return None
    used = [f"capability {c}" for c in capabilities] + [f"hook {h}" for h in hooks]
    for what in sorted(used):
        need = INTRODUCED.get(what)
        if need is not None and need > mine:
            kind, name = what.split(" ", 1)
            return (f"{kind} {name!r} is part of contract {need[0]}.{need[1]}, the policy declares "
                    f"{declared} (declare contract = \"{need[0]}.{need[1]}\")")
    return None


def compatible_spfcore_range(version: str | None = None) -> str:
    """The dependency range a plugin puts on spfcore: the core releases that
    share this core's contract major, e.g. ``"spfcore>=0.1,<0.2"`` for 0.1.x
    (pre-1.0 cores bump their minor with the contract's major).

    Args:
        version: spfcore's version (default ``spfcore.__version__``).
    """
    if version is None:
        from spfcore import __version__ as version
    major, minor = (int(x) for x in version.split(".")[:2])
    if major == 0:
        return f"spfcore>={major}.{minor},<{major}.{minor + 1}"
    return f"spfcore>={major}.{minor},<{major + 1}"


def _shape() -> str:
    """The contract's shape as text: one line per hook (name, arguments,
    options) and per view or answer type (its fields or columns)."""
    from spfcore import hookspecs, registry, views

    lines = []
    for name in hookspecs.HOOK_NAMES:
        fn = getattr(hookspecs, name)
        opts = getattr(fn, "spfcore_spec", {}) or {}
        flags = ",".join(f"{k}={opts[k]}" for k in sorted(opts) if opts[k])
        lines.append(f"hook {name}{inspect.signature(fn)} [{flags}]")
    for cls in (views.BlockView, views.RequestView, views.Score, views.Scores, views.Hint):
        lines.append(f"{cls.__name__}: " + ", ".join(f"{a.name}={a.default!r}" for a in attrs.fields(cls)))
    cols = sorted([n for n, v in vars(views.BlockBatch).items() if not n.startswith("_") and isinstance(v, property)]
                  + [n for n in views.BlockBatch.__slots__ if not n.startswith("_")])
    lines.append("BlockBatch columns: " + ", ".join(cols))
    lines.append("BlockTable: " + ", ".join(n for n in views.BlockTable.__slots__ if not n.startswith("_")))
    lines.append(f"NEVER_ARRIVAL={views.NEVER_ARRIVAL}")
    lines.append("capabilities: " + ", ".join(sorted(registry.CAPABILITIES)))
    lines.append("policy attributes: " + ", ".join(registry.REQUIRED_ATTRIBUTES))
    return "\n".join(lines)


def contract_digest() -> str:
    """First 16 hex digits of the SHA-256 of the contract's shape (hook
    signatures and options, view and answer fields, BlockBatch columns,
    capabilities, required policy attributes)."""
    return hashlib.sha256(_shape().encode()).hexdigest()[:16]
