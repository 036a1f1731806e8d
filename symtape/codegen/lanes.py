"""Lanes: straight-line IR over one point, rewritten to compute several points at once.

Large kernels are not vectorised by LLVM across points (its loop vectoriser's time grows too
fast with the size of the loop body), nor are kernels calling library functions (it would
only scalarise the calls again), so those kernels do it themselves: every value of the
point function becomes a vector of :data:`LANES` points (``double`` -> ``<8 x double>``,
``i1`` -> ``<8 x i1>``), each instruction the same instruction on vectors. The rewrite is
textual, on the closed grammar the lowering table and :mod:`~symtape.codegen.vecmath` write
(``%r = op [flags] type operands``, ``call``, ``select``, casts, declarations and
definitions): scalar types widen, intrinsic suffixes ``.f64`` become ``.v8f64`` (the IR
functions of ``vecmath`` have the same naming, so their vector twins are the same text
widened), literal operands become splats of the type before them, and calls of C library
functions, which have no vector form, go through a wrapper calling them once per lane.
Every lane computes exactly what the scalar code computes for its point: the same
instructions in the same order, so results are bit for bit those of one point at a time --
except where an op has a form of its own for lanes (``Op.lanes``: sin and cos, computed by
polynomials in IR instead of the C library, within 1 ulp).
"""

from __future__ import annotations

import re

__all__ = ["LANES", "LANES_MARK", "points", "widen", "vector", "libm_wrapper"]

#: Points per vector of doubles: one 512-bit register (two 256-bit ones where that is the
#: widest, which LLVM splits into); :func:`points` of floats, twice as many.
LANES = 8


def points(size: int) -> int:
    """Points per vector of floats of ``size`` bytes: one 512-bit register's worth.

    >>> points(8), points(4)
    (8, 16)
    """
    return LANES * 8 // size


#: The comment line of a kernel module in lane mode; ``jit.py`` optimises such modules with a
#: short pipeline of its own.
LANES_MARK = "; lanes mode"

_TOKEN = re.compile(
    r"(?P<type>(?<![\w%@.$#])(?:double|float|i64|i32|i8|i1)(?![\w.]))"
    r"|(?P<sfx>\.(?:f64|f32)(?=\())"
    r"|(?P<lit>(?<=[\s(,])(?:-?0x[0-9A-Fa-f]+|-?\d+(?:\.\d+)?(?:e[+-]?\d+)?|true|false)"
    r"(?=[,)\s]|$))"
)


def vector(scalar: str, lanes: int = LANES) -> str:
    """The vector type of ``lanes`` elements of ``scalar``.

    >>> vector("double")
    '<8 x double>'
    """
    return f"<{lanes} x {scalar}>"


def widen(line: str, lanes: int = LANES, wrapped: frozenset = frozenset()) -> str:
    """``line`` (one instruction, declaration or definition header over scalars) over
    vectors of ``lanes`` points; calls of the functions named in ``wrapped`` go to their
    per-lane wrappers (:func:`libm_wrapper`).

    >>> widen("%r = fadd double %a, 1.000000e+00")
    '%r = fadd <8 x double> %a, splat (double 1.000000e+00)'
    >>> widen("%r = call double @llvm.fabs.f64(double %a)")
    '%r = call <8 x double> @llvm.fabs.v8f64(<8 x double> %a)'
    >>> widen("%r = select i1 %c, double 0.0, double %x", 4)
    '%r = select <4 x i1> %c, <4 x double> splat (double 0.0), <4 x double> %x'
    """
    last = None

    def sub(m: re.Match) -> str:
        nonlocal last
        if m.group("type") is not None:
            last = m.group("type")
            return vector(last, lanes)
        if m.group("sfx") is not None:
            return f".v{lanes}{m.group('sfx')[1:]}"
        if last is None:
            raise AssertionError(f"lanes: literal without a type in {line!r}")
        return f"splat ({last} {m.group('lit')})"

    out = _TOKEN.sub(sub, line)
    for name in wrapped:
        out = out.replace(f"@{name}(", f"@{name}.v{lanes}(")
    return out


def libm_wrapper(name: str, scalar: str, arity: int, lanes: int = LANES,
                 wrapper: str | None = None) -> str:
    """``@<name>.v<lanes>`` (or ``@<wrapper>``): the scalar function ``name`` (of the C
    library, or defined in the module) on each lane in turn.

    >>> print(libm_wrapper("erf", "double", 1, 2))  # doctest: +NORMALIZE_WHITESPACE
    define internal <2 x double> @erf.v2(<2 x double> %a0) nounwind {
    entry:
      %a0.0 = extractelement <2 x double> %a0, i64 0
      %r.0 = call double @erf(double %a0.0)
      %v.0 = insertelement <2 x double> poison, double %r.0, i64 0
      %a0.1 = extractelement <2 x double> %a0, i64 1
      %r.1 = call double @erf(double %a0.1)
      %v.1 = insertelement <2 x double> %v.0, double %r.1, i64 1
      ret <2 x double> %v.1
    }
    """
    vt = vector(scalar, lanes)
    params = ", ".join(f"{vt} %a{i}" for i in range(arity))
    lines = [f"define internal {vt} @{wrapper or f'{name}.v{lanes}'}({params}) nounwind {{",
             "entry:"]
    prev = "poison"
    for k in range(lanes):
        for i in range(arity):
            lines.append(f"  %a{i}.{k} = extractelement {vt} %a{i}, i64 {k}")
        args = ", ".join(f"{scalar} %a{i}.{k}" for i in range(arity))
        lines += [f"  %r.{k} = call {scalar} @{name}({args})",
                  f"  %v.{k} = insertelement {vt} {prev}, {scalar} %r.{k}, i64 {k}"]
        prev = f"%v.{k}"
    lines += [f"  ret {vt} {prev}", "}"]
    return "\n".join(lines)
