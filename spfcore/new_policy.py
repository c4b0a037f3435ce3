"""``spfcore new-policy NAME``: write a complete, publishable policy package
from the copier template shipped in ``spfcore/templates/policy``.

The package: ``pyproject.toml`` (setuptools build, the ``spfcore.policies``
entry point, a dependency on the spfcore releases that share this core's
contract, keyword ``spfcore-policy``), ``src/spfcore_NAME/`` with a policy in
the batch form and a documented ``Params``, ``tests/`` (MiniCache tests and
the conformance kit), and a README (install, describe, simulate, bench,
gate).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import click

from spfcore import contract

#: The template folder (a copier template: copier.yml + template/).
TEMPLATE = Path(__file__).parent / "templates" / "policy"
NAME_RE = re.compile(r"[a-z][a-z0-9_]*")


def render(name: str, dest: str | Path, *, description: str | None = None, author: str = "") -> Path:
    """Render the policy package of ``name`` into the new folder ``dest``.

    The package is rendered into a temporary folder beside ``dest`` and
    renamed into place, so ``dest`` is either complete or absent.

    Args:
        name: Policy name: a lowercase identifier (``[a-z][a-z0-9_]*``); the
            distribution is ``spfcore-<name with - for _>``, the module
            ``spfcore_<name>``.
        dest: Folder to create (must not exist, or be empty).
        description: One line for the package metadata and README.
        author: ``Name <email>`` or empty.

    Returns:
        ``dest`` as a Path.

    Raises:
        ValueError: a bad name, ``dest`` exists and is not an empty folder, or
            it cannot be created (a parent is a file or not writable).
    """
    import copier

    if not NAME_RE.fullmatch(name):
        raise ValueError(f"policy name {name!r}: must be a lowercase identifier ([a-z][a-z0-9_]*), "
                         "it is the entry-point name and part of the module name")
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ValueError(f"{dest}: exists and is not an empty folder; choose another --dir")
    major, minor, _ = contract.parse(contract.CONTRACT_VERSION)
    data = {"name": name, "author": author, "contract": f"{major}.{minor}",
            "spfcore_requirement": contract.compatible_spfcore_range()}
    if description:
        data["description"] = description
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    except OSError as exc:  # a parent that is a file, or a folder we may not write: a usage error
        raise ValueError(f"{dest}: cannot create it ({exc.strerror or exc}: {exc.filename})") from None
    try:
        copier.run_copy(str(TEMPLATE), tmp, data=data, defaults=True, quiet=True, overwrite=True,
                        unsafe=False, skip_tasks=True)
        if dest.exists():
            dest.rmdir()  # empty, checked above
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


@click.command("new-policy")
@click.argument("name")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="Folder to create [./spfcore-NAME, with - for _].")
@click.option("--description", default=None, help="One line about the policy.")
@click.option("--author", default="", help="Name <email>, for the package metadata.")
def new_policy_command(name, directory, description, author) -> None:
    """Write a complete policy package for NAME: pyproject (entry point,
    compatible spfcore range), src layout, a batch-form policy with a
    documented Params, tests using MiniCache and the conformance kit, and a
    README with install / describe / simulate / bench / gate."""
    from spfcore import registry

    dest = Path(directory or f"spfcore-{name.replace('_', '-')}")
    taken = registry.by_name({}).get(name)
    if taken is not None:
        raise click.BadParameter(f"a policy {name!r} is already installed ({taken.distribution}); "
                                 "two distributions cannot share a name", param_hint="NAME")
    try:
        render(name, dest, description=description, author=author)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME/--dir") from None
    click.echo(f"wrote {dest}/ (policy {name!r}, distribution spfcore-{name.replace('_', '-')}). Next:\n"
               f"  pip install -e '{dest}[test]' && pytest {dest} && spfcore bench {name} --quick")
