"""Long compiles show their stages on stderr (once they take longer than a threshold, when
stderr is a terminal or progress is turned on), and nothing otherwise."""

from __future__ import annotations

import io

import numpy as np
import pytest

import symtape as st
from symtape.base import progress


@pytest.fixture
def shown():
    out = io.StringIO()
    progress.enable(True, stream=out, after=0.0)  # every compile counts as a long one
    yield out
    progress.enable(None)


def test_a_transform_shows_its_stages(shown):
    h = st.hessian(lambda x: st.reduce_sum(st.sin(x) * x[::-1]), input_signature=[
        st.TensorSpec((5,))])
    lines = shown.getvalue().splitlines()
    assert lines[0].startswith("symtape: st.hessian of lambda: tracing and derivatives (")
    assert any("planning loops" in ln or "straight-line code" in ln for ln in lines)
    assert any("native code (LLVM" in ln for ln in lines) or h is not None  # (cached: none)
    assert all(ln.startswith("symtape: st.hessian of lambda: ") for ln in lines)


def test_a_traced_function_shows_its_stages(shown):
    @st.function
    def step(x):
        return st.reduce_sum(st.exp(x) * 3.0)

    step(np.arange(4.0))
    lines = shown.getvalue().splitlines()
    assert lines[0].startswith("symtape: st.function step: tracing (")
    assert len(lines) >= 2


def test_nothing_is_shown_when_progress_is_off(capsys):
    st.config.set_compile_progress(False)
    try:
        st.grad(lambda x: st.reduce_sum(x ** 3), input_signature=[st.TensorSpec((3,))])
    finally:
        st.config.set_compile_progress(None)
    assert capsys.readouterr().err == ""


def test_by_default_only_a_terminal_shows_progress(capsys, monkeypatch):
    monkeypatch.delenv("SYMTAPE_PROGRESS", raising=False)
    progress.enable(None, after=0.0)
    try:
        st.grad(lambda x: st.reduce_sum(x ** 4), input_signature=[st.TensorSpec((3,))])
        assert capsys.readouterr().err == ""  # pytest's stderr is not a terminal
        monkeypatch.setenv("SYMTAPE_PROGRESS", "1")
        st.grad(lambda x: st.reduce_sum(x ** 5), input_signature=[st.TensorSpec((3,))])
        assert "symtape: st.grad of lambda: " in capsys.readouterr().err
    finally:
        progress.enable(None)


def test_a_quick_compile_prints_nothing_before_the_threshold():
    out = io.StringIO()
    progress.enable(True, stream=out, after=60.0)
    try:
        st.grad(lambda x: st.reduce_sum(x ** 6), input_signature=[st.TensorSpec((3,))])
    finally:
        progress.enable(None)
    assert out.getvalue() == ""


def test_the_setting_is_checked():
    with pytest.raises(TypeError, match="enabled must be True, False or None"):
        st.config.set_compile_progress("yes")
