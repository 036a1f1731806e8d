"""The documentation: README stays short and opens with the two fresh-machine commands; the
site in docs/ builds with Sphinx with warnings as errors; the code of every page runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md"))


def test_readme_is_short_and_starts_with_the_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 250
    commands = [ln for ln in lines[:10] if ln.startswith("pip install")]
    assert commands[0].startswith('pip install -e ".[test]" && python -m symtape demo')
    assert commands[1].startswith('pip install -e ".[test]" && python -m pytest')


def test_every_page_is_in_the_table_of_contents():
    index = (ROOT / "docs" / "index.md").read_text()
    for page in PAGES + sorted((ROOT / "docs").glob("*.rst")):
        if page.stem != "index":
            assert f"\n{page.stem}\n" in index, page.name


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                           "html", str(ROOT / "docs"), str(tmp_path / "html")],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    api = (tmp_path / "html" / "api.html").read_text()
    for name in ("symtape.GradientTape", "symtape.math.reduce_sum", "symtape.hessian",
                 "symtape.keras.callbacks.EarlyStopping"):
        assert f'id="{name}"' in api, name


@pytest.mark.parametrize("page", [p for p in PAGES if "```python" in p.read_text()],
                         ids=lambda p: p.name)
def test_the_code_of_each_page_runs(page):
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", "\n".join(blocks)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
