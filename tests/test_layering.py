"""The import levels of README's architecture section, checked on the source.

Every module has a level (its folder's, unless named); a module imports symtape modules of
lower levels, or of its own folder without a cycle. An import of a higher level is allowed
only where :data:`UPWARD` names it with its reason: each is deferred (inside a function, or
a ``LazyModule``), so a reader sees it where it is used. No module imports another module's
private names, the user surface (keras, nn, optimizers) imports only symtape's public API,
llvmlite is imported only under ``codegen/``, and no module is over 1,000 lines.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from functools import cache
from pathlib import Path


PKG = Path(__file__).resolve().parent.parent / "symtape"

# Levels, bottom up. A folder's modules share its level; inside a folder they may import each
# other (without cycles).
LEVELS = {
    "symtape.base": 0,          # errors, lazy imports, nested structures, the tape stack, places
    "symtape.element": 1,       # SymPy heads, the element DAG, its numpy interpreter
    "symtape.io": 2,            # data-only encodings, bounded file reads
    "symtape.codegen": 3,       # plan -> LLVM IR -> machine code -> callable
    "symtape.core": 3,          # tensor-level nodes, primitive protocol, apply, leaves
    "symtape.ops": 4,           # the op table: one family module per kind of op
    "symtape.derivatives": 5,   # reverse sweep, substitution rules, sparsity, Taylor, tape
    "symtape.compile": 6,       # planner, batch splitting, Function and the transforms
    "symtape": 7,               # the user surface: math, nn, linalg, keras, saving, ...
    "symtape.keras": 8,
    "symtape.__init__": 9,
    "symtape.__main__": 10,
}

# Deferred imports of a higher level: (importer, imported) -> why.
UPWARD: dict[tuple[str, str], str] = {
    ("symtape.ops.control", "symtape.derivatives.sweep"):
        "a loop's derivative is a loop over the reverse sweep of its body's program",
    ("symtape.ops.control", "symtape.compile.function"):
        "a long loop's eager value is its compiled loop's (one semantics, 10^5 steps in ms)",
}

PUBLIC_ONLY = ("symtape.keras", "symtape.nn", "symtape.optimizers")
MAX_LINES = 1000


def _name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1]) if parts[-1] == "__init__" and len(parts) > 2 else ".".join(parts)


def _level(mod: str) -> int:
    while mod not in LEVELS:
        mod = mod.rsplit(".", 1)[0]
    return LEVELS[mod]


def _folder(mod: str) -> str:
    return mod.rsplit(".", 1)[0] if (PKG.parent / (mod.replace(".", "/") + ".py")).exists() \
        else mod


#: The package's modules (its example programs are scripts shipped as data, not modules).
MODULES = {_name(p): p for p in PKG.rglob("*.py") if "examples" not in p.parts}


def _is_module(name: str) -> bool:
    return name in MODULES


@cache
def imports(mod: str) -> tuple:
    """(target module, line, deferred, imported names) for every symtape import of ``mod``."""
    tree = ast.parse(MODULES[mod].read_text())
    out = []
    deferred_lines = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            deferred_lines.update(n.lineno for n in ast.walk(fn) if hasattr(n, "lineno"))
    for node in ast.walk(tree):
        deferred = getattr(node, "lineno", 0) in deferred_lines
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] == "symtape":
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                if _is_module(sub):
                    out.append((sub, node.lineno, deferred, ()))
                else:
                    out.append((node.module, node.lineno, deferred, (a.name,)))
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{mod}:{node.lineno}: relative import; write it absolute")
        elif isinstance(node, ast.Import):
            out.extend((a.name, node.lineno, deferred, ()) for a in node.names
                       if a.name.startswith("symtape."))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "LazyModule":
            name = node.args[2].value
            if name.startswith("symtape."):
                out.append((name, node.lineno, True, ()))
    return tuple(out)


def test_every_module_is_placed():
    for mod in MODULES:
        assert _level(mod) is not None, mod


def test_imports_point_downward():
    bad = []
    for mod in MODULES:
        for target, line, deferred, _ in imports(mod):
            if _folder(target) == _folder(mod) or _level(target) < _level(mod):
                continue
            if (mod, target) in UPWARD and deferred:
                continue
            bad.append(f"{mod}:{line} (level {_level(mod)}) imports {target} "
                       f"(level {_level(target)})" + (" deferred" if deferred else ""))
    assert not bad, "\n".join(bad)


def test_no_cycles_inside_a_folder():
    """Modules of one folder import each other along one order (module-level imports)."""
    edges = {m: {t for t, _, deferred, _ in imports(m)
                 if not deferred and _folder(t) == _folder(m) and t != m and t != _folder(m)}
             for m in MODULES}
    state: dict[str, int] = {}
    cycles = []

    def visit(m, stack):
        state[m] = 1
        for t in sorted(edges.get(m, ())):
            if state.get(t) == 1:
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t, stack + [t])
        state[m] = 2

    for m in sorted(MODULES):
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(cycles)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_aliases(tree: ast.Module) -> dict[str, str]:
    """Local names bound to symtape modules (imports and ``LazyModule`` stand-ins)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.split(".")[0] == "symtape":
            out.update((a.asname or a.name, f"{node.module}.{a.name}") for a in node.names
                       if _is_module(f"{node.module}.{a.name}"))
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                getattr(node.value.func, "id", None) == "LazyModule" and \
                node.value.args[2].value.startswith("symtape"):
            out[node.targets[0].id] = node.value.args[2].value
    return out


def test_no_private_name_crosses_a_module():
    """Neither ``from m import _x`` nor ``m._x``: what a module shares is public."""
    bad = [f"{mod}:{line} imports {t}.{n}" for mod in MODULES
           for t, line, _, names in imports(mod) for n in names if _private(n) and t != mod]
    for mod, path in MODULES.items():
        tree = ast.parse(path.read_text())
        aliases = _module_aliases(tree)
        bad += [f"{mod}:{node.lineno} reads {aliases[node.value.id]}.{node.attr}"
                for node in ast.walk(tree) if isinstance(node, ast.Attribute) and
                isinstance(node.value, ast.Name) and node.value.id in aliases and
                _private(node.attr)]
    assert not bad, "\n".join(bad)


def test_the_surface_uses_the_public_api():
    """keras and optimizers are written as a user would write them: ``symtape``'s public
    names (``st.random`` among them), its public modules (math, nn, linalg, module,
    optimizers, and ``st.errors``, which is base.errors) and each other, nothing below. nn is
    TensorFlow's ``tf.nn`` level: like math it binds primitives of the op table, so it may
    import ``symtape.ops`` (the table's public names) as well -- and nothing else below."""
    public = {"symtape", "symtape.base.errors", *(f"symtape.{m}" for m in (
        "math", "nn", "linalg", "optimizers", "module"))}
    allowed = {"symtape.nn": public | {"symtape.ops"}}
    bad = [f"{mod}:{line} imports {t}" for mod in MODULES if mod.startswith(PUBLIC_ONLY)
           for t, line, _, _ in imports(mod)
           if t not in allowed.get(mod, public) and not t.startswith("symtape.keras")]
    assert not bad, "\n".join(bad)


def test_no_module_over_a_thousand_lines():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_codegen_and_autodiff_stay_apart():
    for mod in MODULES:
        targets = {_folder(t) for t, _, _, _ in imports(mod)}
        if mod.startswith("symtape.codegen"):
            assert not targets & {"symtape.core", "symtape.ops", "symtape.derivatives"}, mod
        if mod.startswith(("symtape.ops", "symtape.derivatives")):
            assert "symtape.codegen" not in targets, mod


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


def test_llvmlite_only_under_codegen():
    for mod, path in MODULES.items():
        if not mod.startswith("symtape.codegen"):
            assert "llvmlite" not in _third_party(path), path


def test_import_leaves_sympy_to_first_use():
    """``import symtape`` loads neither SymPy nor the element-level modules built on it; the
    first op does, and then its formula is SymPy's."""
    code = ("import sys, symtape as st\n"
            "lazy = ('sympy', 'mpmath', 'symtape.element.graph', 'symtape.element.heads',\n"
            "        'symtape.element.evaluate', 'symtape.codegen.lower',\n"
            "        'symtape.codegen.vecmath')\n"
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
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                    getattr(node.value.func, "id", None) == "LazyModule":
                local, _, name = (a.value if isinstance(a, ast.Constant) else None
                                  for a in node.value.args)
                assert [t.id for t in node.targets] == [local], (path, node.lineno)
                assert importlib.util.find_spec(name) is not None, (path, name)


def test_preload_imports_every_symtape_module_left_to_first_use():
    """``st.config.preload()`` imports every symtape module some ``LazyModule`` leaves to
    first use (its list cannot fall behind a new one) and SymPy."""
    from symtape import config

    lazy = set()
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "LazyModule":
                lazy.add(node.args[2].value)
    mine = {name for name in lazy if name.startswith("symtape.")}
    assert mine and mine <= set(config.FIRST_USE) and "sympy" in config.FIRST_USE
