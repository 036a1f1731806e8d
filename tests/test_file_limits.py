"""Limits on what symtape reads and writes as files: the code cache opens only its own regular
files (no links, FIFOs, devices or oversized entries); st.export_c writes only names and file
names that C compiles."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import symtape as st
from symtape import errors
from symtape.codegen import c99, cache, jit

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
