"""The import levels of STYLE.md: a module imports symtape modules of lower levels only."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "symtape"

# Level of each module; inside L0 the order below is the import order (earlier is lower).
L0 = ["lazy", "errors", "nest", "recording", "numeric", "functions", "heads", "dataio",
      "graph", "evaluate", "taylor_mode"]
LEVELS = {
    **{m: (0, i) for i, m in enumerate(L0)},
    "nodes": (1, 0), "notation": (1, 1), "ops": (1, 2), "codegen": (1, 0),
    "tensor": (2, 0), "loopnest": (2, 1),
    "math": (3, 0), "nn": (3, 1), "linalg": (3, 1), "interop": (3, 1), "random": (3, 0),
    "autodiff": (3, 0),
    "sparsity": (3, 0), "batching": (3, 1),
    "tape": (4, 0), "custom": (4, 0),
    "function": (5, 0), "serialize": (5, 1), "testing": (5, 0), "optimizers": (5, 0),
    "saved_model": (5, 1), "module": (5, 0), "keras": (5, 2), "teaching": (5, 1), "scipy": (5, 1),
    "__init__": (6, 0), "__main__": (6, 0),
}


def _module_of(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if rel.parts[0] in ("codegen", "ops", "keras") else rel.stem


def _imports(path: Path) -> list[tuple[str, int]]:
    """(imported symtape module, line) for every import in the file, lazy ones included."""
    tree = ast.parse(path.read_text())
    in_package = path.parent.name in ("codegen", "ops", "keras")  # '..' is symtape
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                mod = node.module or ""
                if mod.startswith("symtape."):
                    out.append((mod.split(".")[1], node.lineno))
                elif mod == "symtape":
                    out.extend((a.name, node.lineno) for a in node.names)
                continue
            base = node.module.split(".")[0] if node.module else None
            if node.level == 1 and in_package:
                out.append((path.parent.name, node.lineno))
            elif node.level == 2 and in_package or node.level == 1:
                if base:
                    out.append((base, node.lineno))
                else:
                    out.extend((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("symtape."):
                    out.append((a.name.split(".")[1], node.lineno))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "LazyModule":
            name = node.args[2].value  # LazyModule(local, globals(), "symtape.graph")
            if name.startswith("symtape."):
                out.append((name.split(".")[1], node.lineno))
    return out


def _third_party(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "LazyModule":
            names.add(node.args[2].value.split(".")[0])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_module_has_a_level():
    for path in PKG.rglob("*.py"):
        assert _module_of(path) in LEVELS, f"{path} has no level in tests/test_layering.py"


def test_imports_point_downward():
    bad = []
    for path in PKG.rglob("*.py"):
        me = _module_of(path)
        for target, line in _imports(path):
            if target == me and me in ("codegen", "ops", "keras"):
                continue  # modules of a package use each other
            if target not in LEVELS:
                bad.append(f"{path.relative_to(PKG)}:{line} imports unknown symtape.{target}")
            elif LEVELS[target] >= LEVELS[me]:
                bad.append(f"{path.relative_to(PKG)}:{line} ({me}, level {LEVELS[me]}) imports "
                           f"{target} (level {LEVELS[target]})")
    assert not bad, "\n".join(bad)


def test_codegen_and_autodiff_stay_apart():
    for path in (PKG / "codegen").glob("*.py"):
        targets = {t for t, _ in _imports(path)}
        assert not targets & {"tensor", "tape", "ops", "autodiff", "custom", "math"}, path
    assert "codegen" not in {t for t, _ in _imports(PKG / "autodiff.py")}
    for path in (PKG / "ops").glob("*.py"):
        assert "codegen" not in {t for t, _ in _imports(path)}, path


def test_llvmlite_only_under_codegen():
    for path in PKG.rglob("*.py"):
        if path.parent.name != "codegen":
            assert "llvmlite" not in _third_party(path), path


def test_import_leaves_sympy_to_first_use():
    """``import symtape`` loads neither SymPy nor the element-level modules built on it; the
    first op does, and then its formula is SymPy's."""
    code = ("import sys, symtape as st\n"
            "lazy = ('sympy', 'mpmath', 'symtape.graph', 'symtape.heads', 'symtape.evaluate',\n"
            "        'symtape.codegen.lower', 'symtape.codegen.vecmath')\n"
            "print(sorted(m for m in lazy if m in sys.modules))\n"
            "x = st.Variable(2.0, name='x')\n"
            "with st.GradientTape() as t:\n"
            "    y = st.sin(x) * x\n"
            "print('sympy' in sys.modules, t.gradient(y, x).formula())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == ["[]", "True x*cos(x) + sin(x)"]


def test_every_lazy_module_exists_under_its_local_name():
    """A ``LazyModule`` names a module that imports, and is bound to the global it names
    (the first use rebinds that global)."""
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                    getattr(node.value.func, "id", None) == "LazyModule":
                local, _, name = (a.value if isinstance(a, ast.Constant) else None
                                  for a in node.value.args)
                assert [t.id for t in node.targets] == [local], (path, node.lineno)
                assert importlib.util.find_spec(name) is not None, (path, name)
