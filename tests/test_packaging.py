"""What a fresh install carries and the command line: the licence, the typed marker, the
example programs inside the package (listed and run by ``python -m symtape examples``), the
version, and a missing optional dependency named by its extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import symtape as st
from symtape import __main__ as cli

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent


def test_licence_typed_marker_and_changelog_exist():
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert (ROOT / "symtape" / "py.typed").exists()
    assert "## Unreleased" in (ROOT / "CHANGELOG.md").read_text()


def test_the_wheel_carries_the_examples_and_the_typed_marker():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = meta["tool"]["setuptools"]["package-data"]["symtape"]
    assert "py.typed" in data and "examples/*.py" in data
    assert meta["project"]["license"] == {"text": "MIT"}
    shipped = sorted(p.name for p in (ROOT / "symtape" / "examples").glob("*.py"))
    assert "pendulum_linearisation.py" in shipped and len(shipped) >= 10


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"symtape {st.__version__}"


def test_examples_are_listed_with_their_first_sentence():
    found = cli.examples()
    assert set(found) == {p.stem for p in (ROOT / "symtape" / "examples").glob("*.py")}
    path, line = found["newton_exact_hessian"]
    assert line == "Newton's method on the Rosenbrock function with the exact gradient and Hessian"


def test_examples_command_lists_and_runs_one():
    done = subprocess.run([sys.executable, "-m", "symtape", "examples"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "where_without_trap" in done.stdout  # the list
    assert "A(theta, omega) = [[0, 1], [-9.81*cos(theta), -0.2]]" in done.stdout  # the run


def test_an_unknown_example_is_named(capsys):
    assert cli.run_examples("no_such_example") == 2
    assert "no example named 'no_such_example'" in capsys.readouterr().err


def _sparse_to_scipy():
    x = st.symbol("x", shape=(2,))
    with st.GradientTape() as t:
        y = st.reduce_sum(x ** 3)
    h = t.hessian(y, x)
    return st.compile(h, [x], sparse=True)(__import__("numpy").ones(2)).to_scipy()


@pytest.mark.parametrize("module, call", [
    ("scipy", lambda: st.scipy.minimize(lambda x: st.reduce_sum(x * x), [1.0, 2.0])),
    ("scipy", _sparse_to_scipy),
    ("matplotlib", lambda: st.plot(st.sin, (0.0, 1.0))),
])
def test_a_missing_optional_dependency_names_its_extra(monkeypatch, module, call):
    for name in list(sys.modules):
        if name == module or name.startswith(module + "."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(ImportError) as exc:
        call()
    assert isinstance(exc.value, st.errors.MissingDependencyError)
    assert f"symtape[{'plot' if module == 'matplotlib' else module}]" in str(exc.value)


def test_an_installed_wheel_lists_and_runs_the_examples(tmp_path):
    """``pip install .`` (not editable) into a fresh environment, then ``python -m symtape
    examples`` from elsewhere: the examples come from the installed package."""
    pytest.importorskip("setuptools")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=300)
    python = venv / ("Scripts" if sys.platform == "win32" else "bin") / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps",
                           "--no-build-isolation", str(ROOT)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    run = subprocess.run([str(python), "-m", "symtape", "examples"], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path,
                         env={k: v for k, v in __import__("os").environ.items()
                              if k != "PYTHONPATH"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert str(venv) in run.stdout  # the example ran from the installed package
    assert "A(theta, omega) = [[0, 1], [-9.81*cos(theta), -0.2]]" in run.stdout
