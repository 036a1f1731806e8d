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


def test_blas_threads_of_eager_ops_are_set_and_restored(monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    blas = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    if not blas:
        pytest.skip("numpy's BLAS has no thread pool threadpoolctl can see")
    before = [i["num_threads"] for i in blas]
    st.config.threading.set_intra_op_parallelism_threads(1)
    try:
        assert st.config.threading.get_intra_op_parallelism_threads() == 1
        now = [i["num_threads"] for i in threadpoolctl.threadpool_info()
               if i["user_api"] == "blas"]
        assert now == [1] * len(now)
        a = np.arange(9.0).reshape(3, 3)
        np.testing.assert_array_equal(st.matmul(a, a).numpy(), a @ a)
    finally:
        st.config.threading.set_intra_op_parallelism_threads(0)
    assert [i["num_threads"] for i in threadpoolctl.threadpool_info()
            if i["user_api"] == "blas"] == before
    st.config.threading.set_inter_op_parallelism_threads(2)
    assert st.config.threading.get_inter_op_parallelism_threads() == 2
    st.config.threading.set_inter_op_parallelism_threads(0)
    with pytest.raises(st.errors.InvalidArgumentError, match="int >= 0"):
        st.config.threading.set_intra_op_parallelism_threads(-1)


def test_blas_threads_without_threadpoolctl_name_the_extra(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "threadpoolctl", None)
    with pytest.raises(ImportError, match=r"symtape\[threads\]"):
        st.config.threading.set_intra_op_parallelism_threads(1)
