"""JIT and cache: O3 object code cached on disk, reused across processes, checked on read."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import sympy as sp

import symtape
from symtape.element import graph
from symtape.codegen import cache, compile_atoms, ir, jit
from symtape.base.errors import CompileError

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import sympy as sp
    from symtape.element import graph
    from symtape.codegen import compile_atoms, jit
    x = graph.Leaf.new("x")
    e = graph.add(graph.call(sp.cosh, x), graph.power(x, sp.Integer(3)))
    f = compile_atoms([np.array(e, dtype=object)], [np.array(x, dtype=object)])
    print(jit.STATS.compiles, jit.STATS.cache_hits, float(f(2.0)))
""")


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("SYMTAPE_CACHE_DIR", str(path))
    return path


def run_script(cache_dir) -> list[str]:
    env = dict(os.environ, SYMTAPE_CACHE_DIR=str(cache_dir))
    root = os.path.dirname(os.path.dirname(symtape.__file__))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def entries(cache_dir) -> list:
    return sorted((cache_dir / "obj").glob("*.o"))


def test_second_process_hits_the_cache_without_compiling(fresh_cache):
    compiles, hits, value = run_script(fresh_cache)
    assert (compiles, hits) == ("1", "0")
    assert len(entries(fresh_cache)) == 1
    compiles, hits, value2 = run_script(fresh_cache)
    assert (compiles, hits) == ("0", "1")
    assert value == value2 == repr(float(np.cosh(2.0) + 8.0))


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_corrupt_entry_is_recompiled(fresh_cache, damage):
    run_script(fresh_cache)
    (entry,) = entries(fresh_cache)
    blob = bytearray(entry.read_bytes())
    if damage == "truncate":
        blob = blob[: len(blob) // 2]
    elif damage == "flip":
        blob[-20] ^= 0xFF
    else:
        blob = bytearray()
    entry.write_bytes(bytes(blob))
    compiles, hits, _ = run_script(fresh_cache)
    assert (compiles, hits) == ("1", "0")
    assert cache.read(entry.stem) is not None  # rewritten whole, with a valid MAC


def test_in_process_hit_does_no_llvm_work(fresh_cache):
    x = graph.Leaf.new("x")
    outs = [np.array(graph.call(sp.sinh, x), dtype=object)]
    compile_atoms(outs, [np.array(x, dtype=object)])
    before = jit.STATS.snapshot()
    compile_atoms(outs, [np.array(x, dtype=object)])
    after = jit.STATS.snapshot()
    assert after["compiles"] == before["compiles"]
    assert after["cache_hits"] == before["cache_hits"] + 1


def test_unwritable_cache_is_ignored(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("SYMTAPE_CACHE_DIR", str(blocker / "sub"))
    x = graph.Leaf.new("x")
    f = compile_atoms([np.array(graph.call(sp.exp, x), dtype=object)],
                      [np.array(x, dtype=object)])
    assert float(f(0.0)) == 1.0


def test_cache_key_covers_ir_and_host():
    k = jit.cache_key("define void @a() { ret void }")
    assert k != jit.cache_key("define void @b() { ret void }")
    assert len(k) == 64


def test_fastmath_flags_only_when_asked():
    x = graph.Leaf.new("x")
    e = graph.add(graph.mul(x, x), x)
    plain = compile_atoms([np.array(e, dtype=object)], [np.array(x, dtype=object)])
    fast = compile_atoms([np.array(e, dtype=object)], [np.array(x, dtype=object)],
                         fastmath=True)
    flags = " ".join(ir.FASTMATH_FLAGS)
    assert flags not in plain.llvm_ir and "nnan" not in fast.llvm_ir
    assert f"fmul {flags} double" in fast.llvm_ir
    np.testing.assert_allclose(fast(np.arange(5.0)), plain(np.arange(5.0)))


def test_bad_ir_raises_compile_error():
    with pytest.raises(CompileError, match="LLVM rejected"):
        jit.compile_object("define void @f( {")


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 mnemonics")
def test_object_code_is_vectorised_for_the_host():
    xs = [graph.Leaf.new(f"x{i}") for i in range(4)]
    outs = [np.array([graph.mul(v, v) for v in xs], dtype=object)]
    f = compile_atoms(outs, [np.array(xs, dtype=object)])
    assert "pd" in f.asm  # packed double instructions: the loop or the body was vectorised



@pytest.mark.skipif(not jit.host().triple.startswith(("x86_64", "amd64")),
                    reason="x86-64 tuning")
def test_rows_of_points_are_vectorised_without_gathers():
    # a point reading a row of 10 (Rosenbrock's value): with AVX-512 LLVM's own choice was
    # four-wide gathers, 3.7x slower than loads and shuffles on this class of machine
    def rosen(x):
        return symtape.reduce_sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    f = symtape.derivative(rosen, order=0, input_signature=[symtape.TensorSpec((10,))])
    x = np.random.default_rng(0).normal(size=(64, 10))
    want = [np.sum(100 * (r[1:] - r[:-1] ** 2) ** 2 + (1 - r[:-1]) ** 2) for r in x]
    np.testing.assert_allclose(f(x), want, rtol=1e-14)
    asm = f.asm
    assert "pd\t" in asm or "pd " in asm  # vectorised across points
    assert "gather" not in asm and "scatter" not in asm


NEIGHBOUR = textwrap.dedent('''
    import sys
    import llvmlite.binding as llvm
    IR = """
    define void @f(ptr %a, ptr %out) {
      %p1 = getelementptr double, ptr %a, i64 1
      %p2 = getelementptr double, ptr %a, i64 2
      %p3 = getelementptr double, ptr %a, i64 3
      %x0 = load double, ptr %a
      %x1 = load double, ptr %p1
      %m0 = fmul double %x0, %x1
      %x2 = load double, ptr %p2
      %d0 = fdiv double %m0, %x2
      %x3 = load double, ptr %p3
      %m1 = fmul double %x3, %x3
      %s0 = fadd double %d0, %m1
      %d1 = fdiv double %x1, %x3
      %s1 = fadd double %s0, %d1
      %m2 = fmul double %x0, %x2
      %s2 = fadd double %s1, %m2
      store double %s2, ptr %out
      ret void
    }
    """

    def listing():
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        tm = llvm.Target.from_default_triple().create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
            opt=3)
        mod = llvm.parse_assembly(IR)
        return tm.emit_assembly(mod)

    before = listing()
    import numpy as np
    import symtape as st
    g = st.grad(lambda x: st.reduce_sum(st.exp(x) * x ** 3),
                input_signature=[st.TensorSpec((40,))])
    g(np.ones((3, 40)))
    assert st.codegen.jit.STATS.compiles > 0
    print("same" if listing() == before else "changed")
''')


def test_llvm_options_of_other_llvmlite_users_are_untouched(fresh_cache):
    # LLVM's command-line options are global to the process: symtape sets none, so a module
    # another llvmlite user (numba) compiles after symtape's kernels gets the same machine
    # code as before them (with the instruction schedulers turned off for the process, the
    # listing of this function changes on x86-64)
    out = subprocess.run([sys.executable, "-c", NEIGHBOUR], capture_output=True, text=True,
                         env={**os.environ, "SYMTAPE_CACHE_DIR": str(fresh_cache)}, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "same"
