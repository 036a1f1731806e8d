"""The two spellings of a native routine's steps (``codegen.routines``): LLVM IR and C.

A routine's algorithm calls a writer's methods -- integer index arithmetic, loads and
stores at strides, float operations and comparisons, variables, loops and branches -- and
the writer spells each as IR instructions (:class:`Ir`) or C statements (:class:`C`), so
the two are the same operations in the same order.
"""

from __future__ import annotations

import struct

__all__ = ["Ir", "C"]


class Ir:
    """Writes the steps as LLVM IR: loop counters and scalars in allocas (promoted to
    registers by LLVM), one basic block per loop header, body and exit."""

    def __init__(self, t: str) -> None:
        self.t = t
        self.sfx = "f64" if t == "double" else "f32"
        self.lines: list = []
        self.allocas: list = []
        self.count = 0

    def fresh(self, tag: str) -> str:
        self.count += 1
        return f"%{tag}{self.count}"

    def emit(self, tag: str, text: str) -> str:
        v = self.fresh(tag)
        self.lines.append(f"  {v} = {text}")
        return v

    # integers (i64 values or Python ints)
    @staticmethod
    def _i(v) -> str:
        return str(v) if isinstance(v, int) else v

    def plus(self, v, k) -> str:
        return self.emit("i", f"add nsw i64 {self._i(v)}, {self._i(k)}")

    def index(self, strides: tuple, i, j) -> str:
        parts = []
        for v, s in ((i, strides[0]), (j, strides[1])):
            if s == 0 or v == 0:
                continue
            parts.append(self._i(v) if s == 1 else self.emit("i", f"mul nsw i64 {self._i(v)}, {s}"))
        if not parts:
            return "0"
        return parts[0] if len(parts) == 1 else self.emit("i", f"add nsw i64 {parts[0]}, "
                                                               f"{parts[1]}")

    def address(self, ptr: str, strides: tuple, i, j) -> str:
        return self.emit("q", f"getelementptr inbounds {self.t}, ptr %{ptr}, "
                              f"i64 {self.index(strides, i, j)}")

    def load(self, ptr: str, strides: tuple, i, j) -> str:
        return self.emit("v", f"load {self.t}, ptr {self.address(ptr, strides, i, j)}")

    def store(self, ptr: str, strides: tuple, i, j, value: str) -> None:
        self.lines.append(f"  store {self.t} {value}, ptr {self.address(ptr, strides, i, j)}")

    def swap(self, ptr: str, strides: tuple, r: str, s: str, j) -> None:
        pa, pb = self.address(ptr, strides, r, j), self.address(ptr, strides, s, j)
        va = self.emit("v", f"load {self.t}, ptr {pa}")
        vb = self.emit("v", f"load {self.t}, ptr {pb}")
        self.lines += [f"  store {self.t} {vb}, ptr {pa}", f"  store {self.t} {va}, ptr {pb}"]

    # floats
    def number(self, x: float) -> str:
        return f"{float(x):e}"

    def identity(self, i, j) -> str:
        same = self.emit("b", f"icmp eq i64 {self._i(i)}, {self._i(j)}")
        return self.emit("v", f"select i1 {same}, {self.t} 1.0, {self.t} 0.0")

    def fabs(self, v: str) -> str:
        return self.emit("v", f"call {self.t} @llvm.fabs.{self.sfx}({self.t} {v})")

    def sqrt(self, v: str) -> str:
        return self.emit("v", f"call {self.t} @llvm.sqrt.{self.sfx}({self.t} {v})")

    def _op(self, op: str, a: str, b: str) -> str:
        return self.emit("v", f"{op} {self.t} {a}, {b}")

    def add(self, a, b):
        return self._op("fadd", a, b)

    def copysign(self, mag, sign):
        return self.emit("v", f"call {self.t} @llvm.copysign.{self.sfx}({self.t} {mag}, "
                              f"{self.t} {sign})")

    def sub(self, a, b):
        return self._op("fsub", a, b)

    def mul(self, a, b):
        return self._op("fmul", a, b)

    def div(self, a, b):
        return self._op("fdiv", a, b)

    def neg(self, a):
        return self.emit("v", f"fneg {self.t} {a}")

    def better(self, cabs, cand, babs, best) -> str:
        larger = self.emit("b", f"fcmp ogt {self.t} {cabs}, {babs}")
        nan = self.emit("b", f"fcmp uno {self.t} {best}, {best}")
        num = self.emit("b", f"fcmp ord {self.t} {cand}, {cand}")
        return self.emit("b", f"or i1 {larger}, {self.emit('b', f'and i1 {nan}, {num}')}")

    def select(self, c: str, a: str, b: str) -> str:
        return self.emit("v", f"select i1 {c}, {self.t} {a}, {self.t} {b}")

    def select_index(self, c: str, a, b) -> str:
        return self.emit("i", f"select i1 {c}, i64 {self._i(a)}, i64 {self._i(b)}")

    def differ(self, a, b) -> str:
        return self.emit("b", f"icmp ne i64 {self._i(a)}, {self._i(b)}")

    def times(self, v, k) -> str:
        return self.emit("i", f"mul nsw i64 {self._i(v)}, {self._i(k)}")

    def minus(self, a, b) -> str:
        return self.emit("i", f"sub nsw i64 {self._i(a)}, {self._i(b)}")

    def over(self, a, b) -> str:
        return self.emit("i", f"sdiv i64 {self._i(a)}, {self._i(b)}")

    def power_of_two(self, p) -> str:
        return self.emit("i", f"shl i64 1, {self._i(p)}")

    def odd(self, p) -> str:
        return self.emit("i", f"and i64 {self._i(p)}, 1")

    def smaller(self, a, b) -> str:
        less = self.emit("b", f"icmp slt i64 {self._i(a)}, {self._i(b)}")
        return self.select_index(less, a, b)

    def below(self, a, b) -> str:
        return self.emit("b", f"icmp slt i64 {self._i(a)}, {self._i(b)}")

    def not_below(self, a, b) -> str:
        return self.emit("b", f"icmp sge i64 {self._i(a)}, {self._i(b)}")

    def both(self, a: str, b: str) -> str:
        return self.emit("b", f"and i1 {a}, {b}")

    def either(self, a: str, b: str) -> str:
        return self.emit("b", f"or i1 {a}, {b}")

    def less(self, a: str, b: str) -> str:
        return self.emit("b", f"fcmp olt {self.t} {a}, {b}")

    def finite(self, v: str) -> str:
        d = self.emit("v", f"fsub {self.t} {v}, {v}")
        return self.emit("b", f"fcmp oeq {self.t} {d}, 0.0")

    def is_zero(self, v: str) -> str:
        return self.emit("b", f"fcmp oeq {self.t} {v}, 0.0")

    def wins(self, cabs: str, babs: str) -> str:
        """``cabs`` beats ``babs`` as numpy's ``argmax`` has it (larger, or the first nan)."""
        larger = self.emit("b", f"fcmp ogt {self.t} {cabs}, {babs}")
        nan = self.emit("b", f"fcmp uno {self.t} {cabs}, {cabs}")
        num = self.emit("b", f"fcmp ord {self.t} {babs}, {babs}")
        return self.emit("b", f"or i1 {larger}, {self.emit('b', f'and i1 {nan}, {num}')}")

    def nan(self) -> str:
        return "0x7FF8000000000000"

    def exact(self, x: float) -> str:
        """A constant spelled exactly (LLVM's hexadecimal double)."""
        return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(x)))[0]

    def negate(self, c: str) -> str:
        return self.emit("b", f"xor i1 {c}, true")

    def before(self, ka: str, kb: str, descending: bool) -> str:
        """Key ``ka`` strictly before ``kb`` (nan last ascending, first descending)."""
        plain = self.emit("b", f"fcmp {'ogt' if descending else 'olt'} {self.t} {ka}, {kb}")
        late, early = (ka, kb) if descending else (kb, ka)  # the nan, the number
        nan = self.emit("b", f"fcmp uno {self.t} {late}, {late}")
        num = self.emit("b", f"fcmp ord {self.t} {early}, {early}")
        return self.either(plain, self.both(nan, num))

    def to_float(self, v) -> str:
        return self.emit("v", f"sitofp i64 {self._i(v)} to {self.t}")

    def to_int(self, v: str) -> str:
        return self.emit("i", f"fptosi {self.t} {v} to i64")

    # variables: (alloca, type)
    def var(self, tag: str, init=None):
        slot = self.fresh(f"{tag}.slot")
        integer = isinstance(init, int) or (isinstance(init, str) and init.startswith("%i"))
        ty = "i64" if integer else self.t
        self.allocas.append(f"  {slot} = alloca {ty}")
        if init is not None:
            self.lines.append(f"  store {ty} {self._i(init)}, ptr {slot}")
        return slot, ty

    def set(self, var, value) -> None:
        slot, ty = var
        self.lines.append(f"  store {ty} {self._i(value)}, ptr {slot}")

    def get(self, var) -> str:
        slot, ty = var
        return self.emit("i" if ty == "i64" else "v", f"load {ty}, ptr {slot}")

    # control
    def each(self, lo, hi, body, down: bool = False) -> None:
        """``body(i)`` for ``i`` in ``[lo, hi)`` (descending when ``down``)."""
        k = self.fresh("L")[1:]
        slot = f"%{k}.i"
        self.allocas.append(f"  {slot} = alloca i64")
        start = self.emit("i", f"sub nsw i64 {hi}, 1") if down else self._i(lo)
        self.lines += [f"  store i64 {start}, ptr {slot}", f"  br label %{k}.head",
                       f"{k}.head:"]
        i = self.emit("i", f"load i64, ptr {slot}")
        more = self.emit("b", f"icmp sge i64 {i}, {self._i(lo)}") if down else \
            self.emit("b", f"icmp slt i64 {i}, {hi}")
        self.lines += [f"  br i1 {more}, label %{k}.body, label %{k}.exit", f"{k}.body:"]
        body(i)
        step = self.emit("i", f"add nsw i64 {i}, {-1 if down else 1}")
        self.lines += [f"  store i64 {step}, ptr {slot}", f"  br label %{k}.head",
                       f"{k}.exit:"]

    def when(self, cond: str, body) -> None:
        self.branch(cond, body, None)

    def branch(self, cond: str, then, other) -> None:
        k = self.fresh("W")[1:]
        alt = f"{k}.else" if other else f"{k}.done"
        self.lines += [f"  br i1 {cond}, label %{k}.then, label %{alt}", f"{k}.then:"]
        then()
        self.lines += [f"  br label %{k}.done"]
        if other:
            self.lines.append(f"{alt}:")
            other()
            self.lines += [f"  br label %{k}.done"]
        self.lines.append(f"{k}.done:")


class C:
    """Writes the steps as C statements."""

    def __init__(self, ctype: str) -> None:
        self.t = ctype
        self.lines: list = []
        self.depth = 1
        self.count = 0

    def fresh(self, tag: str) -> str:
        self.count += 1
        return f"{tag}{self.count}"

    def put(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def emit(self, tag: str, expr: str, ty: str | None = None) -> str:
        v = self.fresh(tag)
        self.put(f"const {ty or self.t} {v} = {expr};")
        return v

    def plus(self, v, k: int) -> str:
        return f"({v} + {k})"

    @staticmethod
    def index(strides: tuple, i, j) -> str:
        parts = [str(v) if s == 1 else f"{v} * {s}" for v, s in ((i, strides[0]), (j, strides[1]))
                 if s != 0 and v != 0]
        return " + ".join(parts) or "0"

    def load(self, ptr: str, strides: tuple, i, j) -> str:
        return self.emit("v", f"{ptr}[{self.index(strides, i, j)}]")

    def store(self, ptr: str, strides: tuple, i, j, value: str) -> None:
        self.put(f"{ptr}[{self.index(strides, i, j)}] = {value};")

    def swap(self, ptr: str, strides: tuple, r: str, s: str, j) -> None:
        a, b = self.index(strides, r, j), self.index(strides, s, j)
        v = self.emit("v", f"{ptr}[{a}]")
        self.put(f"{ptr}[{a}] = {ptr}[{b}];")
        self.put(f"{ptr}[{b}] = {v};")

    def number(self, x: float) -> str:
        return f"(({self.t}){float(x)!r})"

    def identity(self, i, j) -> str:
        return f"({i} == {j} ? ({self.t})1 : ({self.t})0)"

    def fabs(self, v: str) -> str:
        return self.emit("v", f"fabs{'f' if self.t == 'float' else ''}({v})")

    def sqrt(self, v: str) -> str:
        return self.emit("v", f"sqrt{'f' if self.t == 'float' else ''}({v})")

    def add(self, a, b):
        return self.emit("v", f"{a} + {b}")

    def copysign(self, mag, sign):
        return self.emit("v", f"copysign{'f' if self.t == 'float' else ''}({mag}, {sign})")

    def sub(self, a, b):
        return self.emit("v", f"{a} - {b}")

    def mul(self, a, b):
        return self.emit("v", f"{a} * {b}")

    def div(self, a, b):
        return self.emit("v", f"{a} / {b}")

    def neg(self, a):
        return f"(-{a})"

    def better(self, cabs, cand, babs, best) -> str:
        return self.emit("c", f"{cabs} > {babs} || ({best} != {best} && {cand} == {cand})",
                         "int")

    def select(self, c: str, a: str, b: str) -> str:
        return self.emit("v", f"{c} ? {a} : {b}")

    def select_index(self, c: str, a, b) -> str:
        return self.emit("k", f"{c} ? {a} : {b}", "int64_t")

    def differ(self, a, b) -> str:
        return f"{a} != {b}"

    def times(self, v, k) -> str:
        return self.emit("k", f"{v} * {k}", "int64_t")

    def minus(self, a, b) -> str:
        return self.emit("k", f"{a} - {b}", "int64_t")

    def over(self, a, b) -> str:
        return self.emit("k", f"{a} / {b}", "int64_t")

    def power_of_two(self, p) -> str:
        return self.emit("k", f"(int64_t)1 << {p}", "int64_t")

    def odd(self, p) -> str:
        return self.emit("k", f"{p} & 1", "int64_t")

    def smaller(self, a, b) -> str:
        return self.emit("k", f"{a} < {b} ? {a} : {b}", "int64_t")

    # (conditions are named values, as in the IR: read after the variables change)
    def below(self, a, b) -> str:
        return self.emit("c", f"{a} < {b}", "int")

    def not_below(self, a, b) -> str:
        return self.emit("c", f"{a} >= {b}", "int")

    def both(self, a: str, b: str) -> str:
        return self.emit("c", f"{a} && {b}", "int")

    def either(self, a: str, b: str) -> str:
        return self.emit("c", f"{a} || {b}", "int")

    def less(self, a: str, b: str) -> str:
        return self.emit("c", f"{a} < {b}", "int")

    def finite(self, v: str) -> str:
        return self.emit("c", f"{v} - {v} == 0", "int")

    def is_zero(self, v: str) -> str:
        return self.emit("c", f"{v} == 0", "int")

    def wins(self, cabs: str, babs: str) -> str:
        return self.emit("c", f"{cabs} > {babs} || ({cabs} != {cabs} && {babs} == {babs})",
                         "int")

    def nan(self) -> str:
        return f"(({self.t})NAN)"

    def exact(self, x: float) -> str:
        """A constant spelled exactly (C99's hexadecimal floating constant)."""
        return f"(({self.t}){float(x).hex()})"

    def negate(self, c: str) -> str:
        return self.emit("c", f"!{c}", "int")

    def before(self, ka: str, kb: str, descending: bool) -> str:
        late, early = (ka, kb) if descending else (kb, ka)
        plain = f"{ka} > {kb}" if descending else f"{ka} < {kb}"
        return self.emit("c", f"({plain}) || ({late} != {late} && {early} == {early})", "int")

    def to_float(self, v) -> str:
        return f"(({self.t}){v})"

    def to_int(self, v: str) -> str:
        return self.emit("k", f"(int64_t){v}", "int64_t")

    def var(self, tag: str, init=None):
        name = self.fresh(tag)
        integer = isinstance(init, int) or (isinstance(init, str) and init[:1] in "ik")
        ty = "int64_t" if integer else self.t
        self.put(f"{ty} {name}" + (f" = {init};" if init is not None else ";"))
        return name, ty

    def set(self, var, value) -> None:
        self.put(f"{var[0]} = {value};")

    def get(self, var) -> str:
        return var[0]

    def each(self, lo, hi, body, down: bool = False) -> None:
        i = self.fresh("i")
        if down:
            self.put(f"for (int64_t {i} = {hi} - 1; {i} >= {lo}; --{i}) {{")
        else:
            self.put(f"for (int64_t {i} = {lo}; {i} < {hi}; ++{i}) {{")
        self.depth += 1
        body(i)
        self.depth -= 1
        self.put("}")

    def when(self, cond: str, body) -> None:
        self.branch(cond, body, None)

    def branch(self, cond: str, then, other) -> None:
        self.put(f"if ({cond}) {{")
        self.depth += 1
        then()
        if other:
            self.depth -= 1
            self.put("} else {")
            self.depth += 1
            other()
        self.depth -= 1
        self.put("}")
