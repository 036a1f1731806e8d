"""Limits on what symtape reads and writes as files: the code cache opens only its own regular
files (no links, FIFOs, devices or oversized entries); st.export_c writes only names and file
names that C compiles; st.load and st.saved_model.load bound the cost of every constant, shape
and name they read."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import mpmath
import numpy as np
import pytest
import sympy as sp

import symtape as st
from symtape import io as dataio
from symtape.io import constant_bounds
from symtape.base import errors
from symtape.element import graph
from symtape.codegen import c99, cache, compile_atoms, jit

ROOT = Path(__file__).resolve().parent.parent
posix = pytest.mark.skipif(os.name != "posix", reason="FIFOs, devices and links are POSIX")


# --------------------------------------------------------------------------------------------
# The code cache
# --------------------------------------------------------------------------------------------


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, private code cache for one test."""
    path = tmp_path / "cache"
    monkeypatch.setenv("SYMTAPE_CACHE_DIR", str(path))
    return path


def _ir(tag: str) -> str:
    """IR of a function returning 7 whose text is new to this process (no in-memory hit)."""
    return f"; {tag} {os.urandom(8).hex()}\ndefine i64 @seven() {{ ret i64 7 }}\n"


def _compile(ir: str) -> tuple[bytes, list]:
    """``jit.object_code(ir)`` and the cache warnings it gave; the code must run."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        obj = jit.object_code(ir)
    assert jit.Engine(obj).function("seven", ctypes.c_int64)() == 7
    return obj, [w for w in caught if issubclass(w.category, errors.CacheWarning)]


def _entry(cache_dir: Path, ir: str) -> Path:
    jit.object_code(_ir("make the folder and its key"))
    return cache_dir / "obj" / f"{jit.cache_key(ir)}.o"


def _miss_with_one_warning(ir: str, pattern: str) -> None:
    before = jit.STATS.compiles
    _, found = _compile(ir)
    assert jit.STATS.compiles == before + 1
    assert len(found) == 1 and pattern in str(found[0].message), [str(w.message) for w in found]


def _in_child(scenario: str, cache_dir: Path) -> None:
    """Runs ``scenario(cache_dir)`` of this module in a new process that must finish in time:
    a read that blocks or never ends fails the test instead of hanging it."""
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import test_file_limits
        test_file_limits.{scenario}(Path(sys.argv[1]))
        print("done")
    """)
    env = dict(os.environ, SYMTAPE_CACHE_DIR=str(cache_dir))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    try:
        done = subprocess.run([sys.executable, "-c", script, str(cache_dir)], env=env,
                              capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{scenario}: compiling did not finish within 120 s")
    assert done.returncode == 0 and done.stdout.split() == ["done"], done.stderr[-2000:]


def fifo_entry(cache_dir: Path) -> None:
    ir = _ir("fifo")
    entry = _entry(cache_dir, ir)
    os.mkfifo(entry, 0o600)
    _miss_with_one_warning(ir, "FIFO")
    assert entry.is_file() and cache.read(jit.cache_key(ir)) is not None  # replaced
    before = jit.STATS.cache_hits
    assert _compile(ir)[1] == [] and jit.STATS.cache_hits == before + 1


def dev_zero_entry(cache_dir: Path) -> None:
    ir = _ir("zero")
    entry = _entry(cache_dir, ir)
    entry.symlink_to("/dev/zero")
    _miss_with_one_warning(ir, "symbolic link")
    assert not entry.is_symlink() and cache.read(jit.cache_key(ir)) is not None


def fifo_key(cache_dir: Path) -> None:
    (cache_dir / "obj").mkdir(parents=True, mode=0o700)
    os.chmod(cache_dir, 0o700)
    os.mkfifo(cache_dir / "key", 0o600)
    _miss_with_one_warning(_ir("fifo key"), "key file")
    assert list((cache_dir / "obj").iterdir()) == []


@posix
def test_a_fifo_entry_is_a_miss_not_a_hang(cache_dir):
    _in_child("fifo_entry", cache_dir)


@posix
@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_an_entry_linked_to_dev_zero_is_a_miss(cache_dir):
    _in_child("dev_zero_entry", cache_dir)


@posix
def test_a_fifo_key_file_does_not_block(cache_dir):
    _in_child("fifo_key", cache_dir)


@posix
def test_an_entry_linked_to_a_valid_entry_is_not_followed(cache_dir):
    ir = _ir("linked")
    entry = _entry(cache_dir, ir)
    elsewhere = cache_dir.parent / "elsewhere.o"
    jit.object_code(ir)
    os.replace(entry, elsewhere)  # a valid, signed entry, reached only through a link
    entry.symlink_to(elsewhere)
    _miss_with_one_warning(ir, "symbolic link")


@posix
def test_a_folder_in_place_of_an_entry_is_a_miss(cache_dir):
    ir = _ir("folder")
    entry = _entry(cache_dir, ir)
    entry.mkdir()
    _miss_with_one_warning(ir, "not a regular file (a folder)")


def test_an_oversized_entry_is_not_read(cache_dir):
    ir = _ir("big")
    entry = _entry(cache_dir, ir)
    with open(entry, "wb") as fh:
        fh.truncate(cache.MAX_ENTRY_BYTES + 1)  # sparse: costs no disk
    _miss_with_one_warning(ir, f"more than {cache.MAX_ENTRY_BYTES}")
    assert entry.stat().st_size < 1 << 20 and cache.read(jit.cache_key(ir)) is not None


@posix
@pytest.mark.parametrize("which", ["folder", "obj subfolder"])
def test_a_linked_cache_folder_is_not_used(tmp_path, monkeypatch, which):
    real = tmp_path / "real"
    (real / "obj").mkdir(parents=True, mode=0o700)
    os.chmod(real, 0o700)
    if which == "folder":
        link = tmp_path / "link"
        link.symlink_to(real)
        monkeypatch.setenv("SYMTAPE_CACHE_DIR", str(link))
    else:
        root = tmp_path / "root"
        root.mkdir(mode=0o700)
        (root / "obj").symlink_to(real / "obj")
        link = root / "obj"
        monkeypatch.setenv("SYMTAPE_CACHE_DIR", str(root))
    ir = _ir("linked folder")
    before = jit.STATS.compiles
    _, found = _compile(ir)
    assert jit.STATS.compiles == before + 1
    assert len(found) == 1 and "symbolic link" in str(found[0].message)
    assert str(link) in str(found[0].message)
    assert list((real / "obj").iterdir()) == [] and not (real / "key").exists()
    assert _compile(ir)[1] == [] and jit.STATS.compiles == before + 2  # once per folder


def test_entries_still_round_trip(cache_dir):
    digest = cache.key("symtape-file-limits", os.urandom(8))
    data = np.arange(1000, dtype=np.int64).tobytes()
    assert cache.write(digest, data) and cache.read(digest) == data


# --------------------------------------------------------------------------------------------
# st.export_c: names C can compile
# --------------------------------------------------------------------------------------------


def _square(input_name: str = "x", name: str = "sq"):
    x = st.symbol(input_name, shape=(2,))
    return st.compile(x * x + st.sin(x), [x], name=name)


BAD_C_NAMES = {
    "int": "keyword", "restrict": "keyword", "double": "keyword", "_Bool": "keyword",
    "class": "keyword", "template": "keyword", "bool": "keyword", "main": "entry point",
    "_Private": "reserved", "__x": "reserved", "NAN": "<math.h>", "INFINITY": "<math.h>",
    "HUGE_VAL": "<math.h>", "sin": "<math.h>", "exp": "<math.h>", "fmaf": "<math.h>",
    "nextafterl": "<math.h>", "isnan": "<math.h>", "M_PI": "<math.h>", "y0": "<math.h>",
    "int64_t": "<stdint.h>", "uint_least8_t": "<stdint.h>", "INT32_MAX": "<stdint.h>",
    "UINT64_C": "<stdint.h>", "n": "generated code", "j": "generated code",
    "v12": "generated code", "st_sign": "generated code", "st_modf": "generated code",
    "my-fn": "not a C identifier", "é": "not a C identifier", "1x": "not a C identifier",
}


@pytest.mark.parametrize("name", list(BAD_C_NAMES))
def test_export_c_refuses_a_function_name_c_cannot_compile(tmp_path, name):
    with pytest.raises(errors.InvalidArgumentError, match=re.escape(BAD_C_NAMES[name])) as info:
        st.export_c({name: _square()}, tmp_path / "lib")
    assert repr(name) in str(info.value) and "st.export_c" in str(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["int", "restrict", "NAN", "sin", "int64_t", "n", "v0",
                                  "st_max", "__in", "LIB_H"])
def test_export_c_refuses_an_argument_name_c_cannot_compile(tmp_path, name):
    with pytest.raises(errors.InvalidArgumentError, match="input name") as info:
        st.export_c({"f": _square(name)}, tmp_path / "lib")
    assert repr(name) in str(info.value) and "'f'" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_render_many_refuses_bad_output_names_and_clashes():
    plan = _square().c_kernel()[0]
    with pytest.raises(errors.InvalidArgumentError, match="output name 'float'"):
        c99.render_many([(plan, "f", "float64", ["x"], ["float"])], "lib.h")
    with pytest.raises(errors.InvalidArgumentError, match="output name 'x' is also the C"):
        c99.render_many([(plan, "f", "float64", ["x"], ["x"])], "lib.h")
    with pytest.raises(errors.InvalidArgumentError, match=r"'a-b' \(in C: a_b\) is also"):
        c99.render_many([(plan, "f", "float64", ["a_b"], ["a-b"])], "lib.h")
    with pytest.raises(errors.InvalidArgumentError, match="include guard"):
        c99.render_many([(plan, "LIB_H", "float64", ["x"], None)], "lib.h")


@pytest.mark.parametrize("stem", ['a"b', "a\\b", "a\nb", "a b", "x>y", "é", ".hidden", "-o",
                                  "a*b", "a;b"])
def test_export_c_refuses_a_file_name_an_include_cannot_hold(tmp_path, stem):
    with pytest.raises(errors.InvalidArgumentError, match="#include") as info:
        st.export_c({"f": _square()}, tmp_path / f"{stem}.c")
    assert repr(stem) in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_an_export_with_good_names_compiles_warning_free(tmp_path):
    """Names close to the refused ones (``interval``, ``sine``, ``n2``, ``x_``) and a stem with
    '.' and '-' give C that compiles under -Wall -Wextra -Werror and computes f."""
    cc = shutil.which("cc") or shutil.which("gcc")
    f = _square("interval", name="sine")
    g = _square("n2", name="x_")
    header, source = st.export_c({"sine": f, "x_": g, "Int64": f}, tmp_path / "my-lib.v2.c")
    assert header.name == "my-lib.v2.h" and '#include "my-lib.v2.h"' in source.read_text()
    if cc is None:
        pytest.skip("no C compiler")
    for std, lang in (("-std=c99", "c"), ("-std=c11", "c")):
        done = subprocess.run([cc, std, "-Wall", "-Wextra", "-Werror", "-x", lang, "-c",
                               str(source), "-o", str(tmp_path / "lib.o")],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    lib = tmp_path / "lib.so"
    done = subprocess.run([cc, "-std=c99", "-shared", "-fPIC", str(source), "-o", str(lib),
                           "-lm"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    so = ctypes.CDLL(str(lib))
    x = np.array([[0.5, -2.0], [3.0, 0.0]])
    out = np.empty_like(x)
    so.sine(ctypes.c_int64(2), ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(out.ctypes.data))
    np.testing.assert_allclose(out, x * x + np.sin(x), rtol=1e-15)


# --------------------------------------------------------------------------------------------
# st.load and st.saved_model.load: bounded constants, shapes and names
# --------------------------------------------------------------------------------------------


def _int(n: int) -> list:
    return ["Integer", n]


def _pow(b, e) -> list:
    return ["Pow", b, e]


def _nested(n: int, wrap) -> list:
    node = _int(1)
    for _ in range(n):
        node = wrap(node)
    return node


# Constants that SymPy evaluated for minutes (or without end) before they were bounded; each
# is a file of a few hundred bytes. (name: (expression, what the refusal says))
CRAFTED = {
    "sin(2**(2**24))": (["sin", _pow(_int(2), _pow(_int(2), _int(24)))], "exceeds 2**4096"),
    "10**(10**4000)": (_pow(_int(10), _pow(_int(10), _int(4000))), "exceeds 2**4096"),
    "10**(10**(10**4000))": (_pow(_int(10), _pow(_int(10), _pow(_int(10), _int(4000)))),
                             "exceeds 2**4096"),
    "a 5000-bit integer": (["sin", _int(1 << 5000)], "5001 bits"),
    "a 5000-bit denominator": (["sin", ["Rational", 1, (1 << 5000) + 1]], "5001 bits"),
    "a float of exponent 1e5": (["sin", ["Float", 0, 1, 100000, 1, 53]], "beyond 2**+-4096"),
    "exp(exp(exp(9)))": (["exp", ["exp", ["exp", _int(9)]]], "exceeds 2**4096"),
    "cosh(2**20)": (["cosh", _pow(_int(2), _int(20))], "exceeds 2**4096"),
    "2**(-5000)": (["sin", _pow(_int(2), _int(-5000))], "below 2**-4096"),
    "1/sin(pi)": (_pow(["sin", ["pi"]], _int(-1)), "may be 0"),
    "exp(1/(sqrt(2)**2 - 2))": (["exp", _pow(["Add", _pow(_pow(_int(2), ["Rational", 1, 2]),
                                                          _int(2)), _int(-2)], _int(-1))],
                                "may be 0"),
    "log(-1)": (["log", _int(-1)], "not a real number"),
    "asin(2)": (["asin", _int(2)], "not a real number"),
    "tan(pi/2)": (["tan", ["Mul", ["Rational", 1, 2], ["pi"]]], "may be infinite"),
    "nested sin(2**1000 x)": (_nested(3, lambda n: ["sin", ["Mul", _pow(_int(2), _int(1000)),
                                                              n]]), "bits of working precision"),
    "sin(pi + 1e-30 x) x 5": (_nested(5, lambda n: ["sin", ["Add", ["pi"], [
        "Mul", ["Rational", 1, 10 ** 30], n]]]), "levels"),
    "(x + pi)**(1/3) x 8": (_nested(8, lambda n: _pow(["Add", n, ["pi"]], ["Rational", 1, 3])),
                            "levels"),
    "a sum of 300 sines": (["Add", *[["sin", _int(k)] for k in range(1, 301)]], "601 nodes"),
    "floor(2**400 * sum(sin))": (["floor", ["Mul", _pow(_int(2), _int(400)), [
        "Add", *[["sin", _int(k)] for k in range(1, 6)]]]], "applies floor"),
    "Mod(10**300, 2**-4000)": (["Mod", _int(10 ** 300), ["Float", 0, 1, -4000, 1, 53]],
                               "applies Mod"),
    "pi < 4": (["Piecewise", ["ExprCondPair", _int(1), ["StrictLessThan", ["pi"], _int(4)]]],
               "applies StrictLessThan"),
    "sin(oo)": (["sin", ["oo"]], "infinity or nan"),
}


def _quarter_pi(path: Path) -> dict:
    """Saves ``x * pi/4`` compiled at ``path``; its document (constant: instruction 1)."""
    x = graph.Leaf.new("x")
    f = compile_atoms([np.array(graph.mul(x, sp.pi / 4), dtype=object)],
                      [np.array(x, dtype=object)], input_names=["x"], name="quarter_pi")
    f.save(path)
    doc = _read_doc(path)
    assert doc["plan"]["instrs"][1] == ["const", [], ["0x1.921fb54442d18p-1",
                                                      ["Mul", ["Rational", 1, 4], ["pi"]]]]
    return doc


def _read_doc(path: Path) -> dict:
    blob = path.read_bytes()
    return dataio.load_document(blob, blob[:8], 2, str(path), "symtape file")


def _write_doc(path: Path, doc: dict, magic: bytes = b"SYMTAPEF") -> None:
    path.write_bytes(dataio.dump_document(doc, magic, 2))


class _SineModel:
    def __init__(self):
        self.w = st.Variable([2.0, 3.0], name="w")

    @st.function(input_signature=[st.TensorSpec((2,))])
    def f(self, x):
        return st.sin(x * self.w) + st.sqrt(st.constant(2.0))


def _saved_model(folder: Path) -> tuple[Path, dict]:
    st.saved_model.save(_SineModel(), folder)
    path = folder / "saved_model.symtape"
    return path, _read_doc(path)


def _program(doc: dict) -> dict:
    return doc["functions"]["f"][0]


def crafted_loads(folder: Path) -> None:
    """Loads every crafted constant as a compiled function's constant, a saved model's
    constant and a saved model's template; prints ``{case: [error type, message, seconds,
    file bytes]}`` as JSON (run in a child process: before the bounds, these never ended)."""
    results = {}
    for case, (node, _) in CRAFTED.items():
        for where in ("st.load", "saved constant", "saved template"):
            sub = folder / f"{len(results)}"
            sub.mkdir()
            if where == "st.load":
                path = sub / "f.st"
                doc = _quarter_pi(path)
                doc["plan"]["instrs"][1][2] = ["0x1.921fb54442d18p-1", node]
                _write_doc(path, doc)
                load = functools.partial(st.load, path)
            else:
                path, doc = _saved_model(sub)
                if where == "saved constant":
                    _program(doc)["constants"][0]["exprs"] = [node]
                else:
                    x = ["Symbol", "x", {"real": True}]
                    _program(doc)["ops"].append({"kind": "template", "name": "t", "in": [0],
                                                 "out": [1000], "placeholders": [x],
                                                 "template": ["Mul", x, node]})
                _write_doc(path, doc, b"SYMTAPEM")
                load = functools.partial(st.saved_model.load, sub)
            start = time.perf_counter()
            try:
                load()
                outcome = ["loaded", ""]
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                outcome = [type(exc).__name__, str(exc)]
            results[f"{case} as {where}"] = outcome + [time.perf_counter() - start,
                                                       path.stat().st_size]
    print(json.dumps(results))


def test_crafted_constants_are_refused_within_a_second(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import test_file_limits
        test_file_limits.crafted_loads(Path(sys.argv[1]))
    """)
    env = dict(os.environ, SYMTAPE_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    try:
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env,
                              capture_output=True, text=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("loading the crafted files did not finish within 300 s")
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    assert len(results) == 3 * len(CRAFTED)
    for name, (kind, message, seconds, size) in results.items():
        case = name.rsplit(" as ", 1)[0]
        assert size < 1 << 20
        assert kind == "SerializationError", (name, kind, message)
        assert CRAFTED[case][1] in message, (name, message)
        assert seconds < 1.0, (name, seconds)


def test_exact_constants_within_the_bounds_load_with_their_values(tmp_path):
    """Constants up to the bounds still load, with the value of an independent reference:
    mpmath at 2000 bits (sin(2**1000) needs its 1000 bits of pi)."""
    with mpmath.workprec(2000):
        references = {
            "sin(2**1000)": (["sin", _pow(_int(2), _int(1000))],
                             mpmath.sin(mpmath.mpf(2) ** 1000)),
            "sqrt(2)/2": (["Mul", ["Rational", 1, 2], _pow(_int(2), ["Rational", 1, 2])],
                          mpmath.sqrt(2) / 2),
            "acosh(2) + atan(1/3)": (["Add", ["acosh", _int(2)], ["atan", ["Rational", 1, 3]]],
                                     mpmath.acosh(2) + mpmath.atan(mpmath.mpf(1) / 3)),
            "exp(-700) * 2**1000": (["Mul", ["exp", _int(-700)], _pow(_int(2), _int(1000))],
                                    mpmath.exp(-700) * mpmath.mpf(2) ** 1000),
            "1/(pi - 3)": (_pow(["Add", ["pi"], _int(-3)], _int(-1)), 1 / (mpmath.pi - 3)),
        }
    for case, (node, want) in references.items():
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.st"
        doc = _quarter_pi(path)
        value = float(want)
        doc["plan"]["instrs"][1][2] = [value.hex(), node]
        _write_doc(path, doc)
        f = st.load(path)
        np.testing.assert_array_equal(f(np.array([1.0, -2.0])), [value, -2.0 * value],
                                      err_msg=case)


def test_every_head_has_a_bound_or_is_refused_on_constants():
    covered = set(constant_bounds.ENCLOSURE_RULES) | constant_bounds.DECIDED_HEADS
    assert set(dataio.HEADS) <= covered, set(dataio.HEADS) - covered


@pytest.mark.parametrize("shape", [[0, 1 << 39, 1 << 39], [0] + [1 << 39] * 31, [-1],
                                   [1.5], [True], [2] * 33])
def test_crafted_array_shapes_are_refused_not_crashing(tmp_path, shape):
    with pytest.raises(errors.SerializationError, match="shape"):
        dataio.decode_array({"dtype": "float64", "shape": shape, "data": ""})
    path, doc = _saved_model(tmp_path)
    doc["variables"][0]["value"] = {"dtype": "float64", "shape": shape, "data": ""}
    _write_doc(path, doc, b"SYMTAPEM")
    with pytest.raises(errors.SerializationError, match="shape"):
        st.saved_model.load(tmp_path)


@pytest.mark.parametrize("shape", [[1 << 30, 1 << 30, 16], [0, 1 << 30, 1 << 30, 1 << 30]])
def test_a_constant_shape_whose_product_wraps_is_refused(tmp_path, shape):
    # numpy's int64 product of [2**30, 2**30, 16] wraps to 0, which matched no expressions
    path, doc = _saved_model(tmp_path)
    _program(doc)["constants"][0]["shape"] = shape
    _program(doc)["constants"][0]["exprs"] = []
    _write_doc(path, doc, b"SYMTAPEM")
    with pytest.raises(errors.SerializationError, match="elements"):
        st.saved_model.load(tmp_path)


def test_a_large_empty_shape_still_loads(tmp_path):
    a = np.zeros((0, 1 << 20, 1 << 19))
    assert dataio.decode_array(dataio.encode_array(a)).shape == a.shape


LONE = "x\ud800y"


@pytest.mark.parametrize("field", ["name", "input name", "output name"])
def test_names_that_are_not_unicode_are_refused_by_st_load(tmp_path, field):
    path = tmp_path / "f.st"
    doc = _quarter_pi(path)
    if field == "name":
        doc["name"] = LONE
    elif field == "input name":
        doc["input_names"] = [LONE]
        doc["plan"]["inputs"][0]["names"] = [LONE]
    else:
        doc["output_names"] = [LONE]
    path.write_bytes(_dump_raw(doc, b"SYMTAPEF"))
    with pytest.raises(errors.SerializationError, match="not valid Unicode"):
        st.load(path)


@pytest.mark.parametrize("field", ["variable", "function", "symbol"])
def test_names_that_are_not_unicode_are_refused_by_saved_model_load(tmp_path, field):
    path, doc = _saved_model(tmp_path)
    if field == "variable":
        doc["variables"][0]["name"] = LONE
    elif field == "function":
        doc["functions"] = {LONE: doc["functions"]["f"]}
    else:
        _program(doc)["constants"][0]["exprs"] = [["Symbol", LONE, {}]]
    path.write_bytes(_dump_raw(doc, b"SYMTAPEM"))
    with pytest.raises(errors.SerializationError, match="not valid Unicode"):
        st.saved_model.load(tmp_path)


def _dump_raw(doc: dict, magic: bytes) -> bytes:
    """A framed document with its JSON escaped to ASCII, as a file with a ``\\ud800`` escape
    is written (dump_document's UTF-8 cannot hold a lone surrogate)."""
    payload = json.dumps(doc, separators=(",", ":")).encode("ascii")
    return struct.pack("<8sIQ32s", magic, 2, len(payload),
                       hashlib.sha256(payload).digest()) + payload


@pytest.mark.parametrize("where", ["inputs", "outputs"])
def test_a_compiled_function_with_a_crafted_shape_is_refused(tmp_path, where):
    """An output of shape (0, 2**31 - 1, 2**31 - 1) loaded, then failed numpy's allocation
    (a bare ValueError) when called."""
    path = tmp_path / "f.st"
    doc = _quarter_pi(path)
    layout = doc["plan"][where][0]
    layout["shape"] = [0, (1 << 31) - 1, (1 << 31) - 1]
    layout["names" if where == "inputs" else "refs"] = []
    _write_doc(path, doc)
    with pytest.raises(errors.SerializationError, match="elements"):
        st.load(path)


def test_templates_keep_their_non_finite_branches_and_constants():
    """Bounds apply to constants an operation evaluates; a template's nan branch, and its
    constants within the bounds, decode as saved."""
    x = sp.Symbol("x", real=True)
    for e in (sp.Piecewise((x, x > 0), (sp.nan, True)), sp.Max(x, -sp.oo) * sp.sqrt(2),
              x * sp.sin(sp.Integer(2) ** 1000), sp.exp(-x / sp.pi) + sp.Rational(1, 3) ** 500):
        assert dataio.decode_expr(dataio.encode_expr(e)) == e


def special_files(folder: Path) -> None:
    """st.load and st.saved_model.load of a FIFO, /dev/zero and a folder: each refused at
    once, without reading (run in a child process: a FIFO blocked, /dev/zero never ended)."""
    folder.mkdir(parents=True, exist_ok=True)
    fifo, zero = folder / "fifo.st", folder / "zero.st"
    os.mkfifo(fifo, 0o600)
    zero.symlink_to("/dev/zero")
    for path, kind in ((fifo, "a FIFO"), (zero, "a character device"), (folder, "a folder")):
        start = time.perf_counter()
        with pytest.raises(errors.SerializationError, match=f"not a regular file \\({kind}"):
            st.load(path)
        model = folder / f"model-{kind[2:].replace(' ', '-')}"
        model.mkdir()
        target = model / "saved_model.symtape"
        if path.is_dir():
            target.mkdir()
        else:
            target.symlink_to(path)
        with pytest.raises(errors.SerializationError, match=f"not a regular file \\({kind}"):
            st.saved_model.load(model)
        assert time.perf_counter() - start < 1.0


@posix
@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_loading_a_fifo_or_a_device_is_refused_without_reading(tmp_path):
    _in_child("special_files", tmp_path / "files")


def test_an_exported_header_compiles_and_links_from_cpp(tmp_path):
    """The header is C++ too (C linkage, restrict as __restrict): a C++ caller compiles
    against it and links with the C object."""
    cc, cxx = shutil.which("cc") or shutil.which("gcc"), shutil.which("c++") or shutil.which("g++")
    if cc is None or cxx is None:
        pytest.skip("no C and C++ compilers")
    header, source = st.export_c({"sine": _square("interval", name="sine")}, tmp_path / "lib")
    caller = tmp_path / "main.cpp"
    caller.write_text(textwrap.dedent("""
        #include "lib.h"
        #include <cstdio>
        int main() {
            double x[2] = {0.5, -2.0}, out[2];
            sine(1, x, out);
            std::printf("%.17g %.17g\\n", out[0], out[1]);
            return 0;
        }
    """))
    steps = [[cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-c", str(source), "-o",
              str(tmp_path / "lib.o")],
             [cxx, "-std=c++11", "-Wall", "-Wextra", "-Werror", "-I", str(tmp_path), "-c",
              str(caller), "-o", str(tmp_path / "main.o")],
             [cxx, str(tmp_path / "main.o"), str(tmp_path / "lib.o"), "-o",
              str(tmp_path / "main"), "-lm"]]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    out = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, check=True)
    got = [float(v) for v in out.stdout.split()]
    np.testing.assert_allclose(got, [0.25 + np.sin(0.5), 4.0 + np.sin(-2.0)], rtol=1e-15)


def _many_constants(path: Path, count: int, costly: bool) -> None:
    """Saves ``sum_k x * sin(k)`` compiled at ``path`` -- ``count`` distinct exact constants
    -- and, when ``costly``, rewrites each as ``sin(2**1000 + k)`` (within every bound of one
    constant, a few milliseconds each to check) with its value from mpmath at 2000 bits."""
    x = graph.Leaf.new("x")
    terms = [graph.mul(x, sp.sin(sp.Integer(k))) for k in range(1, count + 1)]
    f = compile_atoms([np.array(terms, dtype=object)], [np.array(x, dtype=object)],
                      input_names=["x"], name="many")
    f.save(path)
    if not costly:
        return
    doc = _read_doc(path)
    with mpmath.workprec(2000):
        for ins in doc["plan"]["instrs"]:
            if ins[0] == "const" and ins[2][1][0] == "sin":
                k = ins[2][1][1][1]
                value = float(mpmath.sin(mpmath.mpf(2) ** 1000 + k))
                ins[2] = [value.hex(), ["sin", ["Add", _pow(_int(2), _int(1000)), _int(k)]]]
    _write_doc(path, doc)


def test_a_file_of_many_costly_constants_is_refused_by_its_budget(tmp_path, monkeypatch):
    """Each constant is bounded, but a file may hold thousands: their total work is bounded
    too (constant_bounds.FILE_CONSTANT_SECONDS), so the load is refused, not minutes long.
    (The budget is cut to 0.1 s here: the 1,500 constants take 0.6-1 s to check, about the
    default budget on a fast machine.)"""
    monkeypatch.setattr(constant_bounds, "FILE_CONSTANT_SECONDS", 0.1)
    path = tmp_path / "many.st"
    _many_constants(path, 1500, costly=True)
    assert path.stat().st_size < 1 << 20
    with pytest.raises(errors.SerializationError, match="costly constants is not loaded"):
        st.load(path)


def test_a_file_of_ordinary_exact_constants_loads_within_its_budget(tmp_path):
    path = tmp_path / "some.st"
    _many_constants(path, 200, costly=False)
    f = st.load(path)
    np.testing.assert_allclose(f(np.array([2.0]))[0], 2.0 * np.sin(np.arange(1, 201)),
                               rtol=1e-15)


def test_the_budget_counts_only_inside_a_load():
    with constant_bounds.file_budget("'f'", seconds=0.0):
        with pytest.raises(errors.SerializationError, match="'f': its exact constants"):
            dataio.decode_expr(["sin", _int(3)], "c")
    assert dataio.decode_expr(["sin", _int(3)], "c") == sp.sin(3)  # no budget outside
