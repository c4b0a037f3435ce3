"""`spfcore new-policy`: the rendered package is complete and publishable: its
own tests pass, `python -m build` makes a wheel, and the wheel installed in a
fresh virtual environment is listed by `spfcore list-policies`."""

import json
import os
import site
import subprocess
import sys
import tomllib

import pytest
from click.testing import CliRunner

from spfcore import CONTRACT_VERSION, contract
from spfcore.cli import main
from spfcore.new_policy import render


def test_render_writes_a_complete_package(tmp_path):
    res = CliRunner().invoke(main, ["new-policy", "tail_first", "--dir", str(tmp_path / "pkg"),
                                    "--author", "Ada L <ada@example.org>", "--description", 'Drops "tails"'])
    assert res.exit_code == 0, res.output
    pkg = tmp_path / "pkg"
    files = sorted(str(p.relative_to(pkg)) for p in pkg.rglob("*") if p.is_file())
    assert files == [".gitignore", "README.md", "pyproject.toml", "src/spfcore_tail_first/__init__.py",
                     "tests/test_tail_first.py", "tests/test_tail_first_conformance.py"]
    meta = tomllib.loads((pkg / "pyproject.toml").read_text())
    proj = meta["project"]
    assert proj["name"] == "spfcore-tail-first" and proj["description"] == 'Drops "tails"'
    assert proj["authors"] == [{"name": "Ada L", "email": "ada@example.org"}]
    assert proj["dependencies"][0] == contract.compatible_spfcore_range() == "spfcore>=0.1,<0.2"
    assert proj["entry-points"]["spfcore.policies"] == {"tail_first": "spfcore_tail_first:TailFirstPolicy"}
    assert "spfcore-policy" in proj["keywords"] and meta["build-system"]["build-backend"] == "setuptools.build_meta"
    src = (pkg / "src/spfcore_tail_first/__init__.py").read_text()
    major_minor = ".".join(CONTRACT_VERSION.split(".")[:2])
    assert f'contract = "{major_minor}"' in src and "Attributes:" in src and "Scores(" in src
    readme = (pkg / "README.md").read_text()
    for cmd in ("pip install", "spfcore describe tail_first", "spfcore simulate", "spfcore bench tail_first",
                "spfcore gate", "pytest --spfcore-policy tail_first"):
        assert cmd in readme, cmd


@pytest.mark.parametrize("name, why", [("Bad-Name", "must be a lowercase identifier"),
                                       ("lru", "already installed (spfcore)")])
def test_bad_names_are_refused(tmp_path, name, why):
    res = CliRunner().invoke(main, ["new-policy", name, "--dir", str(tmp_path / "pkg")])
    assert res.exit_code == 2 and why in res.output, res.output
    assert not (tmp_path / "pkg").exists()


def test_an_existing_folder_is_never_overwritten(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="exists and is not an empty folder"):
        render("tail_first", tmp_path / "pkg")
    assert [p.name for p in (tmp_path / "pkg").iterdir()] == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["pkg"]  # no temporary folder left behind


def test_a_folder_that_cannot_be_created_is_a_usage_error(tmp_path):
    """--dir under a file (or an unwritable folder): exit 2 naming the folder, not a
    FileExistsError / PermissionError traceback from mkdir or mkdtemp."""
    (tmp_path / "afile").write_text("mine")
    res = CliRunner().invoke(main, ["new-policy", "tail_first", "--dir", str(tmp_path / "afile" / "pkg")])
    assert res.exit_code == 2, res.output
    assert "cannot create it" in res.output and "afile" in res.output, res.output
    assert "Traceback" not in res.output
    assert [p.name for p in tmp_path.iterdir()] == ["afile"]


def _run(cmd, cwd, env, timeout=600):
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{' '.join(map(str, cmd))} exited {res.returncode}:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    return res.stdout


@pytest.mark.slow
def test_generated_package_tests_build_install_and_list(tmp_path):
    pkg = render("hot_decay_t", tmp_path / "spfcore-hot-decay-t")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("SPFCORE_POLICIES", None)
    # the wheel, built with this environment's setuptools (no download)
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(pkg)],
         tmp_path, env)
    wheels = list((tmp_path / "dist").glob("*.whl"))
    assert [w.name for w in wheels] == ["spfcore_hot_decay_t-0.1.0-py3-none-any.whl"]
    # a fresh venv that sees this environment's packages (spfcore and its dependencies) through a .pth
    # file, the wheel installed into it alone
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    py = venv / "bin" / "python"
    own = _run([py, "-c", "import site; print(site.getsitepackages()[0])"], tmp_path, env).strip()
    with open(os.path.join(own, "_spfcore_parent_env.pth"), "w") as f:
        f.write("".join(f"import site; site.addsitedir({d!r})\n" for d in site.getsitepackages()))
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
          "--disable-pip-version-check", str(wheels[0])], tmp_path, env)
    # the package's own tests (MiniCache + the conformance kit) against the installed wheel
    out = _run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "spfcore.conformance",
                "--spfcore-examples", "10"], pkg, env)
    assert "12 passed" in out, out[-3000:]
    listed = {p["name"]: p for p in json.loads(_run([py, "-m", "spfcore.cli", "list-policies", "--json"],
                                                    tmp_path, env))}
    mine = listed["hot_decay_t"]
    assert (mine["status"], mine["distribution"], mine["version"], mine["contract"]) == \
        ("ok", "spfcore-hot-decay-t", "0.1.0", ".".join(CONTRACT_VERSION.split(".")[:2]))
    assert mine["entry_point"] == "spfcore_hot_decay_t:HotDecayTPolicy"
    where = _run([py, "-c", "import spfcore_hot_decay_t; print(spfcore_hot_decay_t.__file__)"], tmp_path, env)
    assert where.startswith(own)  # the wheel's copy, not the source tree
