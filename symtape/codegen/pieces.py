"""A large kernel's IR cut into modules LLVM can compile side by side, and their object code
packed into one blob.

LLVM's code generator (instruction selection, scheduling, register allocation) takes most
of a large kernel's setup -- 0.7 s of a 20-body Hessian's 19,000 straight-line vector
operations -- and runs on one core. The kernels this package writes are many functions that
are ``noinline`` (the points of a lane kernel, the blocks of a loop nest), so they can be
compiled apart: :func:`split` moves such functions into other modules (giving them external
linkage; the first module declares them), each compiled on its own thread in its own LLVM
context, and :func:`pack` joins the object files into one blob that
:func:`~symtape.codegen.jit.Engine` loads and links together. The machine code of every
function is what it was in one module: only the calls between the pieces go through the
loader's stubs.

A function moves with the internal functions it calls (copied into its piece) and the
constants it reads (copied too: read-only data); one that reads or writes a mutable global
stays in the first module, as does everything else (the program, ``body``, the exported
entry points). Types, declarations, attribute groups and metadata are copied into every
piece.
"""

from __future__ import annotations

import math
import re
import struct

__all__ = ["PIECE_CHARS", "MAX_PIECES", "COPY_CHARS", "split", "pack", "unpack", "PACK_MAGIC"]

#: IR of at least this many characters in movable functions is cut into pieces of about
#: this size (emission runs at about 5 MB of IR a second: a piece is ~0.1-0.2 s of it).
PIECE_CHARS = 1 << 20
#: At most this many pieces besides the first module.
MAX_PIECES = 4
#: The start of a blob of several object files (an object file starts with its format's
#: magic, never with a zero byte).
PACK_MAGIC = b"\0symtape-objects\0"
#: A function that moved is copied (internal) into the other pieces that call it when it is
#: at most this long and has several callers (a vector math routine called in loops), else
#: called there through a declaration (a lane kernel's points, called once by its program).
COPY_CHARS = 1 << 14

_DEFINE = re.compile(r"define\s+(?P<linkage>(?:internal|private)\s+)?(?P<rest>.*?)"
                     r"@(?P<name>[-\w.$]+)\((?P<params>.*)\)(?P<attrs>[^{(]*)\{\s*$")
_GLOBAL = re.compile(r"@(?P<name>[-\w.$]+)\s*=\s*(?P<body>.*)$")
_REF = re.compile(r"@([-\w.$]+)")


class _Define:
    __slots__ = ("name", "text", "header", "refs", "internal", "noinline")

    def __init__(self, lines: list[str]) -> None:
        m = _DEFINE.match(lines[0])
        self.header = m
        self.name = m.group("name") if m else None
        self.text = "\n".join(lines)
        body = "\n".join(lines[1:])
        self.refs = set(_REF.findall(body)) - {self.name}
        self.internal = bool(m and m.group("linkage"))
        self.noinline = bool(m and re.search(r"\bnoinline\b", m.group("attrs")))


def _parse(ir: str):
    """``(head, defines, globals_)``: the top-level lines that are not functions (in order),
    the functions, and ``name -> (line, constant)`` of the global variables."""
    head: list[str] = []
    defines: list[_Define] = []
    globals_: dict = {}
    lines = ir.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("define"):
            j = i
            while j < len(lines) and lines[j] != "}":
                j += 1
            defines.append(_Define(lines[i:j + 1]))
            i = j + 1
            continue
        m = _GLOBAL.match(line)
        if m:
            globals_[m.group("name")] = (line, bool(re.search(r"\bconstant\b",
                                                              m.group("body"))))
        else:
            head.append(line)
        i += 1
    return head, defines, globals_


def _declaration(d: _Define) -> str:
    """``declare`` of a function with the signature of its definition ``d``."""
    params = []
    depth, start, text = 0, 0, d.header.group("params")
    for k, ch in enumerate(text + ","):
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            tokens = text[start:k].split()
            if len(tokens) > 1 and tokens[-1].startswith("%"):
                tokens = tokens[:-1]
            params.append(" ".join(tokens))
            start = k + 1
    params = [p for p in params if p]
    attrs = d.header.group("attrs").strip()
    return f"declare {d.header.group('rest')}@{d.name}({', '.join(params)}) {attrs}".rstrip()


def split(ir: str, piece_chars: int = PIECE_CHARS, max_pieces: int = MAX_PIECES) -> list[str]:
    """``ir`` as a list of modules: the first holds what stays (the entry points, functions
    touching mutable globals) and declares what moved; each further one holds some of the
    ``noinline`` internal functions, external now, with the internal functions they call.
    A module with less than ``piece_chars`` of movable functions comes back whole.

    >>> ir = '''declare double @llvm.sqrt.f64(double)
    ... define internal double @f(double %x) noinline nounwind {
    ... entry:
    ...   %r = call double @llvm.sqrt.f64(double %x)
    ...   ret double %r
    ... }
    ... define double @g(double %x) nounwind {
    ... entry:
    ...   %r = call double @f(double %x)
    ...   ret double %r
    ... }'''
    >>> first, piece = split(ir, piece_chars=1)
    >>> [line for line in first.splitlines() if "@f(" in line]  # declared; called by g
    ['declare double @f(double) noinline nounwind', '  %r = call double @f(double %x)']
    >>> [line for line in piece.splitlines() if "@f(" in line]
    ['define double @f(double %x) noinline nounwind {']
    """
    head, defines, globals_ = _parse(ir)
    head = [line for line in head if line.strip()]
    by_name = {d.name: d for d in defines if d.name is not None}

    def touches_state(d: _Define) -> bool:
        """Whether ``d`` or a function it calls reads or writes a mutable global (or calls
        a function that is not internal)."""
        seen, stack = {d.name}, [d]
        while stack:
            f = stack.pop()
            for r in f.refs - seen:
                seen.add(r)
                if r in globals_:
                    if not globals_[r][1]:
                        return True
                elif r in by_name:
                    if not by_name[r].internal:
                        return True
                    stack.append(by_name[r])
        return False

    movable = [d for d in defines if d.internal and d.noinline and d.header is not None and
               not touches_state(d)]
    total = sum(len(d.text) for d in movable)
    if total < piece_chars:
        return [ir]
    moved = {d.name for d in movable}
    callers = dict.fromkeys(moved, 0)
    for d in defines:
        for r in d.refs & moved:
            callers[r] += 1
    n = min(max_pieces, len(movable), math.ceil(total / piece_chars))
    # the movable functions, in order, cut into ``n`` runs of about equal text
    groups: list[list] = [[] for _ in range(n)]
    done = 0
    for d in movable:
        groups[min(n - 1, done * n // total)].append(d)
        done += len(d.text)
    shared = [line for line in head if not line.startswith(";")]
    pieces = []
    for group in filter(None, groups):
        own = {d.name for d in group}
        texts = [_external(d) for d in group]
        declared, copied, consts = set(), set(), set()
        stack = list(group)
        while stack:
            f = stack.pop()
            for r in f.refs:
                if r in globals_:
                    consts.add(r)
                elif r in by_name and r not in own and r not in copied and r not in declared:
                    g = by_name[r]
                    if r in moved and (callers[r] < 2 or len(g.text) > COPY_CHARS):
                        declared.add(r)  # called where it moved
                        texts.append(_declaration(g))
                    else:  # internal here (one that moved elsewhere is external there)
                        copied.add(r)
                        texts.append(g.text)
                        stack.append(g)
        body = [globals_[c][0] for c in sorted(consts)]
        pieces.append("\n".join(shared + body + texts) + "\n")
    kept = [d.text if d.name not in moved else _declaration(d) for d in defines]
    first = head + [line for line, _ in globals_.values()] + kept
    return ["\n".join(first) + "\n", *pieces]


def _external(d: _Define) -> str:
    """The definition ``d`` with external linkage."""
    first, _, rest = d.text.partition("\n")
    return _DEFINE_LINKAGE.sub("define ", first, count=1) + "\n" + rest


_DEFINE_LINKAGE = re.compile(r"^define\s+(?:internal|private)\s+")


def pack(objects: list[bytes]) -> bytes:
    """Object files as one blob (one object file stays as it is).

    >>> unpack(pack([b"\\x7fELF1", b"\\x7fELF22"]))
    [b'\\x7fELF1', b'\\x7fELF22']
    >>> pack([b"\\x7fELF1"])
    b'\\x7fELF1'
    """
    if len(objects) == 1:
        return objects[0]
    sizes = struct.pack(f"<I{len(objects)}Q", len(objects), *map(len, objects))
    return PACK_MAGIC + sizes + b"".join(objects)


def unpack(blob: bytes) -> list[bytes] | None:
    """The object files of a blob from :func:`pack`, or None when its table is damaged."""
    if not blob.startswith(PACK_MAGIC):
        return [blob]
    at = len(PACK_MAGIC)
    if len(blob) < at + 4:
        return None
    (count,) = struct.unpack_from("<I", blob, at)
    at += 4
    if not 1 < count <= 1 + MAX_PIECES * 4 or len(blob) < at + 8 * count:
        return None
    sizes = struct.unpack_from(f"<{count}Q", blob, at)
    at += 8 * count
    if at + sum(sizes) != len(blob):
        return None
    out = []
    for size in sizes:
        out.append(blob[at:at + size])
        at += size
    return out
