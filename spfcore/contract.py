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
differs from this core's, or that needs a newer minor than this core has. A
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
CONTRACT_VERSION = "1.3.0"

#: :func:`contract_digest` of the contract at :data:`CONTRACT_VERSION`. Changing
#: hooks, columns or answer fields changes the digest: then bump the version
#: (see the module doc for which part) and record the new digest here.
CONTRACT_DIGEST = "575fb016d619286e"

_VERSION = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)(?:\.(0|[1-9]\d*))?$")


def parse(version: str) -> tuple[int, int, int]:
    """``"MAJOR.MINOR[.PATCH]"`` -> ``(major, minor, patch)``.

    Raises:
        ValueError: not a string of that form (the message quotes it).
    """
    m = _VERSION.match(version) if isinstance(version, str) else None
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
