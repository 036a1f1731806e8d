"""Native routines: whole-matrix algorithms a loop-plan block runs once per index of its
space, written as loops in LLVM IR and in C (the same operations in the same order).

Gaussian elimination with partial pivoting (:class:`Routine`: ``solve``, ``inverse``,
``det``) does exactly what the element view of ``ops.linalg`` does on floats, pivot choice
included (the first row of largest magnitude; a number replaces a nan pivot), so compiled
code gives the same bits whether a matrix was unrolled or looped. Its cost is that of the
algorithm, ``n**3 / 3`` multiply-adds, not the ``n**3`` selects and atoms of an unrolled
view: an 80x80 solve plans in milliseconds.

A routine reads and writes through plain pointers, each matrix at compile-time row and
column strides (a transpose is read in place); it keeps its working copy of the matrix in a
scratch buffer of ``n * n`` elements (a temporary of the plan).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

__all__ = ["Routine", "KINDS", "ELIMINATIONS", "ORDERINGS", "BOUNDS"]

#: What each routine computes from its matrix ``A`` (and right-hand sides ``B``).
KINDS = {
    "solve": "X with A X = B (k columns)",
    "inverse": "A^-1 (A X = I)",
    "det": "det A (the product of the pivots, signed by the row exchanges)",
    "cholesky": "L lower triangular with L L^T = A, from A's lower triangle",
    "forward": "X with L X = B, L the lower triangle of A",
    "backward": "X with U X = B, U the upper triangle of A",
    "permute": "B taken in the stable order of the keys A (a line of n)",
    "unpermute": "B put back from the stable order of the keys A (permute's transpose)",
    "argsort": "the indices of the keys A in their stable order",
    "lu": "the packed LU of A with partial pivoting, the permutation matrix and its sign",
    "qr": "q and r of A (m x n) by Householder reflections, packed (LAPACK's signs)",
    "lower_bound": "for each of the k values B, how many of the sorted line A are below it",
    "upper_bound": "for each of the k values B, how many of the sorted line A are not above it",
}
#: The routines that order a line of keys (a stable merge sort of their indices).
ORDERINGS = ("permute", "unpermute", "argsort")
#: The routines that bisect a sorted line for each of k values (``searchsorted``).
BOUNDS = ("lower_bound", "upper_bound")
#: The routines that eliminate with pivoting in a scratch copy of the matrix.
ELIMINATIONS = ("solve", "inverse", "det")


class Routine(NamedTuple):
    """``kind`` of :data:`KINDS` on an ``n`` x ``n`` matrix at strides ``a`` (row, column),
    right-hand sides of ``k`` columns at strides ``b`` (``solve``), the result at strides
    ``out``. Called with pointers ``(A, [B,] out, work)``.

    >>> r = Routine("solve", 4, 1, (4, 1), (1, 0), (1, 0))
    >>> r.n_ops, "fdiv double" in "\\n".join(r.ir("f", "double")[0])
    (80, True)
    """

    kind: str
    n: int
    k: int
    a: tuple
    b: tuple
    out: tuple
    descending: bool = False  # (orderings: largest first, nan first)
    m: int = 0  # (qr: the rows of A, n its columns)
    full: bool = False  # (qr: q square)

    @property
    def n_ops(self) -> int:
        """Arithmetic operations, about (a cost estimate)."""
        if self.kind in ORDERINGS:
            return 8 * self.n * max(1, self.n.bit_length())
        if self.kind in BOUNDS:
            return 4 * self.k * (self.n.bit_length() + 1)
        return self.n ** 3 + self.n * self.n * max(self.k, 1)

    @property
    def columns(self) -> int:
        """Right-hand side columns carried through the elimination or substitution."""
        return {"inverse": self.n, "det": 0, "cholesky": 0}.get(self.kind, self.k)

    @property
    def args(self) -> tuple:
        """The pointers the routine takes, in order: the matrix, the right-hand sides, the
        result, the scratch matrix (only the eliminations have one)."""
        rhs = ("B",) if self.kind in ("solve", "forward", "backward", "permute",
                                      "unpermute") + BOUNDS else ()
        return ("A",) + rhs + ("X",) + (("W",) if self.kind in ELIMINATIONS + ORDERINGS
                                        + ("lu", "qr") else ())

    @property
    def work(self) -> int:
        """The elements of the scratch line ``W``."""
        if self.kind == "qr":
            return self.m * self.n + self.n
        return 2 * self.n if self.kind in ORDERINGS else self.n * self.n

    def ir(self, name: str, t: str) -> tuple:
        """``(lines, declarations)``: ``define internal void @<name>(ptr...)`` in float
        type ``t``."""
        w = _Ir(t)
        self._steps(w)
        params = ", ".join(f"ptr noalias %{a}" for a in self.args)
        sfx = "f64" if t == "double" else "f32"
        head = [f"define internal void @{name}({params}) nounwind {{", "entry:"]
        return (head + w.allocas + w.lines + ["  ret void", "}", ""],
                {f"declare {t} @llvm.fabs.{sfx}({t})", f"declare {t} @llvm.sqrt.{sfx}({t})",
                 f"declare {t} @llvm.copysign.{sfx}({t}, {t})"})

    def c(self, name: str, ctype: str) -> list:
        """``static void <name>(...)``: the same steps in C."""
        w = _C(ctype)
        self._steps(w)
        params = ", ".join(("const " if a in "AB" else "") + f"{ctype} *restrict {a}"
                           for a in self.args)
        return [f"static void {name}({params})", "{"] + w.lines + ["}", ""]

    # -- the algorithms, once for both spellings --------------------------------------------
    def _steps(self, w) -> None:
        if self.kind in ORDERINGS:
            return self._order(w)
        if self.kind in BOUNDS:
            return self._bisect(w)
        if self.kind == "lu":
            return self._lu(w)
        if self.kind == "qr":
            return self._qr(w)
        if self.kind == "cholesky":
            return self._cholesky(w)
        if self.kind in ("forward", "backward"):
            return self._substitute(w)
        return self._eliminate(w)

    def _order(self, w) -> None:
        """A stable bottom-up merge sort of the indices ``0..n-1`` by their keys (nan last
        ascending, first descending; ties in index order, as TensorFlow's), in two halves
        of the scratch line ``W`` (indices held as floats, exact), then the values taken
        (or put back) in that order, or the indices themselves."""
        n, line = self.n, (1, 0)
        w.each(0, n, lambda i: w.store("W", line, i, 0, w.to_float(i)))
        passes = max(n - 1, 0).bit_length()  # runs of 1, 2, 4, ... merged until one is left
        w.each(0, passes, lambda p: self._merge_pass(w, p))
        base = (passes % 2) * n

        def out(k):
            p = w.to_int(w.load("W", line, w.plus(k, base), 0))
            if self.kind == "permute":
                w.store("X", self.out, k, 0, w.load("B", self.b, p, 0))
            elif self.kind == "unpermute":
                w.store("X", self.out, p, 0, w.load("B", self.b, k, 0))
            else:
                w.store("X", self.out, k, 0, w.to_float(p))

        w.each(0, n, out)

    def _bisect(self, w) -> None:
        """For each value ``v`` of ``B``, a branchless binary search of the sorted line
        ``A``: ``lower_bound`` the place of the first key not below ``v`` (``key < v``: a nan
        value is placed first, TensorFlow's lower bound), ``upper_bound`` of the first key
        above it (nan keys last, as numpy's search: a nan value is placed last) -- for a
        sorted line, how many keys precede ``v`` (``ceil(log2(n)) + 1`` comparisons, where
        counting takes ``n``). The halving is known when the code is written."""
        halves, length = [], self.n
        while length > 1:
            halves.append(length // 2)
            length -= length // 2
        upper = self.kind == "upper_bound"

        def precedes(key, v):  # the key lies before v's place
            return w.negate(w.before(v, key, False)) if upper else w.less(key, v)

        def one(j):
            v = w.load("B", self.b, j, 0)
            base = w.var("base", 0)
            for half in halves:
                b = w.get(base)
                ahead = w.plus(b, half)
                w.set(base, w.select_index(precedes(w.load("A", self.a, ahead, 0), v), ahead, b))
            b = w.get(base)
            past = precedes(w.load("A", self.a, b, 0), v)
            w.store("X", self.out, j, 0, w.to_float(w.select_index(past, w.plus(b, 1), b)))

        w.each(0, self.k, one)

    def _merge_pass(self, w, p) -> None:
        """Pass ``p``: runs of ``2**p`` sorted indices in one half of ``W`` merged pairwise
        into the other; the right run's index goes first only when its key is strictly
        before the left's."""
        n, line = self.n, (1, 0)
        width = w.power_of_two(p)
        span = w.times(width, 2)
        src = w.times(w.odd(p), n)
        dst = w.minus(n, src)

        def run(r):
            lo = w.times(r, span)
            mid, hi = w.smaller(w.plus(lo, width), n), w.smaller(w.plus(lo, span), n)
            i, j = w.var("i", lo), w.var("j", mid)

            def step(k):
                iv, jv = w.get(i), w.get(j)
                # (each side read at a place inside its run, whichever is taken)
                pi = w.load("W", line, w.plus(w.smaller(iv, w.plus(mid, -1)), src), 0)
                pj = w.load("W", line, w.plus(w.smaller(jv, w.plus(hi, -1)), src), 0)
                ki = w.load("A", self.a, w.to_int(pi), 0)
                kj = w.load("A", self.a, w.to_int(pj), 0)
                right = w.both(w.below(jv, hi), w.either(w.not_below(iv, mid),
                                                          w.before(kj, ki, self.descending)))
                w.store("W", line, w.plus(k, dst), 0, w.select(right, pj, pi))
                w.set(i, w.select_index(right, iv, w.plus(iv, 1)))
                w.set(j, w.select_index(right, w.plus(jv, 1), jv))

            w.each(lo, hi, step)

        w.each(0, w.over(w.plus(w.plus(span, -1), n), span), run)  # ceil(n / span) runs

    def _lu(self, w) -> None:
        """``ops.decompositions.lu_factor`` step for step (the same roundings): into ``X``
        (a line at stride ``out[0]``) the packed factors row by row, the permutation
        matrix, its sign. The pivot is the first row of largest magnitude (a nan first:
        numpy's ``argmax``); a zero pivot leaves its multipliers 0. A matrix with a nan or
        an infinity has nan factors (``Decomposition.numeric``, TensorFlow's). The row
        permutation is kept in ``W`` (indices as floats, exact)."""
        n, s = self.n, self.out[0]
        lu, line = (n * s, s), (1, 0)
        bad = w.var("bad", 0)
        w.each(0, n, lambda i: w.each(0, n, lambda j: w.set(bad, w.select_index(
            w.finite(w.load("A", self.a, i, j)), w.get(bad), 1))))

        def spoilt():
            w.each(0, 2 * n * n + 1, lambda e: w.store("X", (s, 0), e, 0, w.nan()))

        def factor():
            w.each(0, n, lambda i: w.each(0, n, lambda j: w.store(
                "X", lu, i, j, w.load("A", self.a, i, j))))
            w.each(0, n, lambda i: w.store("W", line, i, 0, w.to_float(i)))
            sign = w.var("sign", w.number(1.0))

            def column(k):
                piv, babs = w.var("p", k), w.var("babs", w.fabs(w.load("X", lu, k, k)))

                def candidate(i):
                    cabs = w.fabs(w.load("X", lu, i, k))
                    take = w.wins(cabs, w.get(babs))
                    w.set(babs, w.select(take, cabs, w.get(babs)))
                    w.set(piv, w.select_index(take, i, w.get(piv)))

                w.each(w.plus(k, 1), n, candidate)
                p = w.get(piv)

                def exchange():
                    w.each(0, n, lambda j: w.swap("X", lu, k, p, j))
                    w.swap("W", line, k, p, 0)
                    w.set(sign, w.neg(w.get(sign)))

                w.when(w.differ(p, k), exchange)
                pivot = w.load("X", lu, k, k)
                zero = w.is_zero(pivot)

                def row(i):
                    low = w.select(zero, w.number(0.0), w.div(w.load("X", lu, i, k), pivot))
                    w.store("X", lu, i, k, low)
                    w.each(w.plus(k, 1), n, lambda j: w.store("X", lu, i, j, w.sub(
                        w.load("X", lu, i, j), w.mul(low, w.load("X", lu, k, j)))))

                w.each(w.plus(k, 1), n, row)

            w.each(0, n, column)
            w.each(0, n, lambda i: w.each(0, n, lambda j: w.store(
                "X", lu, w.plus(i, n), j, w.identity(w.to_int(w.load("W", line, i, 0)), j))))
            w.store("X", lu, 2 * n, 0, w.get(sign))

        w.branch(w.differ(w.get(bad), 0), spoilt, factor)

    def _qr(self, w) -> None:
        """LAPACK's unblocked Householder QR (``dgeqr2``, then ``dorg2r`` for ``q``), as
        numpy's ``qr`` computes matrices of fewer than 128 columns: column ``i``'s reflector
        has ``beta = -sign(alpha) hypot(alpha, |x|)`` (``|x|`` scaled by its largest
        element; no reflection where ``x`` is zero), applied to the columns on its right;
        ``q`` (``m x m`` when ``full``, else ``m x min(m, n)``) accumulated from the last
        reflector back. Into ``X`` (a line at stride ``out[0]``): ``q``, then ``r``. The
        factored matrix and the ``tau``s are in ``W``. Values agree with LAPACK's to
        rounding (its norms are scaled otherwise), not bit for bit; a matrix with a nan or
        an infinity has nan factors, as eager values."""
        m, n, s = self.m, self.n, self.out[0]
        k = min(m, n)
        kq = m if self.full else k
        f, line = (n, 1), (s, 0)  # the factored matrix (row-major in W), X as a line

        def q_at(i, j):
            return w.plus(w.times(i, kq), j)

        def r_at(i, j):
            return w.plus(w.plus(w.times(i, n), j), m * kq)

        bad = w.var("bad", 0)
        w.each(0, m, lambda i: w.each(0, n, lambda j: w.set(bad, w.select_index(
            w.finite(w.load("A", self.a, i, j)), w.get(bad), 1))))

        def spoilt():
            w.each(0, m * kq + kq * n, lambda e: w.store("X", line, e, 0, w.nan()))

        def reflect(mat, at, i, cols_from, cols_to, tau):
            """``I - tau v v^T`` (``v = (1, mat[i+1:, i])``) applied to the columns
            ``cols_from..cols_to`` of ``mat``'s rows ``i..m``: ``dlarf``'s ``w = C^T v``,
            then ``C -= tau v w^T``."""
            def column(j):
                acc = w.var("w", w.number(0.0))
                w.set(acc, w.add(w.get(acc), w.load(mat, at, i, j)))
                w.each(w.plus(i, 1), m, lambda r: w.set(acc, w.add(w.get(acc), w.mul(
                    w.load(mat, at, r, j), w.load(mat, at, r, i)))))
                t = w.mul(w.neg(tau), w.get(acc))
                w.store(mat, at, i, j, w.add(w.load(mat, at, i, j), t))
                w.each(w.plus(i, 1), m, lambda r: w.store(mat, at, r, j, w.add(
                    w.load(mat, at, r, j), w.mul(w.load(mat, at, r, i), t))))

            w.each(cols_from, cols_to, column)

        def factor():
            w.each(0, m, lambda i: w.each(0, n, lambda j: w.store(
                "W", f, i, j, w.load("A", self.a, i, j))))

            def column(i):
                alpha = w.load("W", f, i, i)
                big = w.var("big", w.number(0.0))
                w.each(w.plus(i, 1), m, lambda r: w.set(big, w.select(
                    w.wins(w.fabs(w.load("W", f, r, i)), w.get(big)),
                    w.fabs(w.load("W", f, r, i)), w.get(big))))
                tau = w.var("tau", w.number(0.0))

                def reflector():
                    a, beta = w.var("alpha", alpha), w.var("beta")
                    knt = w.var("knt", 0)
                    w.set(beta, self._beta(w, f, i, m, w.get(big), a))

                    def rescale(_):  # (dlarfg: a beta below safmin is scaled up, 20 times at most)
                        def up():
                            w.each(w.plus(i, 1), m, lambda r: w.store(
                                "W", f, r, i, w.mul(w.load("W", f, r, i), big_up)))
                            w.set(beta, w.mul(w.get(beta), big_up))
                            w.set(a, w.mul(w.get(a), big_up))
                            w.set(knt, w.plus(w.get(knt), 1))

                        w.when(w.less(w.fabs(w.get(beta)), safmin), up)

                    safmin = w.exact(2.0 ** -969 if w.t == "double" else 2.0 ** -102)
                    big_up = w.exact(2.0 ** 969 if w.t == "double" else 2.0 ** 102)
                    w.each(0, 20, rescale)

                    def again():
                        most = w.var("most", w.number(0.0))
                        w.each(w.plus(i, 1), m, lambda r: w.set(most, w.select(
                            w.wins(w.fabs(w.load("W", f, r, i)), w.get(most)),
                            w.fabs(w.load("W", f, r, i)), w.get(most))))
                        w.set(beta, self._beta(w, f, i, m, w.get(most), a))

                    w.when(w.differ(w.get(knt), 0), again)
                    b, al = w.get(beta), w.get(a)
                    w.set(tau, w.div(w.sub(b, al), b))
                    scal = w.div(w.number(1.0), w.sub(al, b))
                    w.each(w.plus(i, 1), m, lambda r: w.store(
                        "W", f, r, i, w.mul(w.load("W", f, r, i), scal)))
                    w.each(0, w.get(knt), lambda _: w.set(beta, w.mul(w.get(beta), safmin)))
                    w.store("W", f, i, i, w.get(beta))

                w.when(w.negate(w.is_zero(w.get(big))), reflector)
                t = w.get(tau)
                w.store("W", f, m, i, t)
                w.when(w.negate(w.is_zero(t)), lambda: reflect("W", f, i, w.plus(i, 1), n, t))

            w.each(0, k, column)
            # q: the reflectors' vectors copied below its diagonal, unit columns beyond k
            w.each(0, m, lambda r: w.each(0, kq, lambda j: w.store(
                "X", line, q_at(r, j), 0, w.number(0.0))))
            w.each(0, k, lambda j: w.each(w.plus(j, 1), m, lambda r: w.store(
                "X", line, q_at(r, j), 0, w.load("W", f, r, j))))
            w.each(k, kq, lambda j: w.store("X", line, q_at(j, j), 0, w.number(1.0)))
            qm = (kq * s, s)

            def back(i):
                t = w.load("W", f, m, i)
                w.store("X", qm, i, i, w.number(1.0))
                w.when(w.negate(w.is_zero(t)), lambda: reflect("X", qm, i, w.plus(i, 1), kq, t))
                w.each(w.plus(i, 1), m, lambda r: w.store("X", qm, r, i, w.mul(
                    w.neg(t), w.load("X", qm, r, i))))
                w.store("X", qm, i, i, w.sub(w.number(1.0), t))
                w.each(0, i, lambda r: w.store("X", qm, r, i, w.number(0.0)))

            w.each(0, k, back, down=True)
            w.each(0, kq, lambda i: w.each(0, n, lambda j: w.store(
                "X", line, r_at(i, j), 0, w.number(0.0))))
            w.each(0, k, lambda i: w.each(i, n, lambda j: w.store(
                "X", line, r_at(i, j), 0, w.load("W", f, i, j))))

        w.branch(w.differ(w.get(bad), 0), spoilt, factor)

    @staticmethod
    def _beta(w, f: tuple, i, m: int, scale: str, alpha_var) -> str:
        """dlarfg's ``beta = -sign(alpha) hypot(alpha, |x|)`` of column ``i`` below its
        diagonal (``|x|`` summed in units of its largest magnitude ``scale``, > 0)."""
        ss = w.var("ss", w.number(0.0))
        w.each(w.plus(i, 1), m, lambda r: w.set(ss, w.add(w.get(ss), w.mul(
            w.div(w.load("W", f, r, i), scale), w.div(w.load("W", f, r, i), scale)))))
        xnorm = w.mul(scale, w.sqrt(w.get(ss)))
        alpha = w.get(alpha_var)
        a_abs = w.fabs(alpha)
        top = w.select(w.wins(a_abs, xnorm), a_abs, xnorm)
        low = w.select(w.wins(a_abs, xnorm), xnorm, a_abs)
        ratio = w.div(low, top)
        hyp = w.mul(top, w.sqrt(w.add(w.number(1.0), w.mul(ratio, ratio))))
        return w.neg(w.copysign(hyp, alpha))

    def _cholesky(self, w) -> None:
        """Cholesky-Banachiewicz, row by row: ``l_ij = (a_ij - sum_{k<j} l_ik l_jk) / l_jj``,
        ``l_ii`` the square root; zeros above the diagonal."""
        n, x = self.n, self.out
        w.each(0, n, lambda i: w.each(0, n, lambda j: w.store("X", x, i, j, w.number(0.0))))

        def row(i):
            def entry(j):
                rest = w.var("rest", w.load("A", self.a, i, j))
                w.each(0, j, lambda k: w.set(rest, w.sub(w.get(rest), w.mul(
                    w.load("X", x, i, k), w.load("X", x, j, k)))))
                off = w.differ(i, j)
                w.branch(off, lambda: w.store("X", x, i, j, w.div(
                    w.get(rest), w.load("X", x, j, j))),
                    lambda: w.store("X", x, i, j, w.sqrt(w.get(rest))))

            w.each(0, w.plus(i, 1), entry)

        w.each(0, n, row)

    def _substitute(self, w) -> None:
        n, x = self.n, self.out
        w.each(0, n, lambda i: w.each(0, self.columns, lambda j: w.store(
            "X", x, i, j, w.load("B", self.b, i, j))))
        self._solved(w, "A", self.a, self.kind == "forward")

    def _solved(self, w, t: str, strides: tuple, forward: bool) -> None:
        """Forward (rows in order, terms of the earlier rows) or backward substitution in
        place of ``X``: ``x_i = (b_i - sum_k t_ik x_k) / t_ii``, the terms in ascending
        ``k``, with the triangle of ``t`` at ``strides``."""
        n, cols, x = self.n, self.columns, self.out

        def solved(i):
            def term(m):
                u = w.load(t, strides, i, m)
                w.each(0, cols, lambda j: w.store("X", x, i, j, w.sub(
                    w.load("X", x, i, j), w.mul(u, w.load("X", x, m, j)))))

            if forward:
                w.each(0, i, term)
            else:
                w.each(w.plus(i, 1), n, term)
            d = w.load(t, strides, i, i)
            w.each(0, cols, lambda j: w.store("X", x, i, j, w.div(w.load("X", x, i, j), d)))

        w.each(0, n, solved, down=not forward)

    def _eliminate(self, w) -> None:
        n, cols = self.n, self.columns
        wn = (n, 1)  # the scratch matrix, row-major
        w.each(0, n, lambda i: w.each(0, n, lambda j: w.store(
            "W", wn, i, j, w.load("A", self.a, i, j))))
        if self.kind == "solve":
            w.each(0, n, lambda i: w.each(0, cols, lambda j: w.store(
                "X", self.out, i, j, w.load("B", self.b, i, j))))
        elif self.kind == "inverse":
            w.each(0, n, lambda i: w.each(0, cols, lambda j: w.store(
                "X", self.out, i, j, w.identity(i, j))))
        sign = w.var("sign", w.number(1.0)) if self.kind == "det" else None

        def column(c):
            piv, best, babs = w.var("p", c), w.var("best"), w.var("babs")
            w.set(best, w.load("W", wn, c, c))
            w.set(babs, w.fabs(w.get(best)))

            def candidate(i):
                cand = w.load("W", wn, i, c)
                cabs = w.fabs(cand)
                take = w.better(cabs, cand, w.get(babs), w.get(best))
                w.set(best, w.select(take, cand, w.get(best)))
                w.set(babs, w.select(take, cabs, w.get(babs)))
                w.set(piv, w.select_index(take, i, w.get(piv)))

            w.each(w.plus(c, 1), n, candidate)
            p = w.get(piv)

            def exchange():
                w.each(0, n, lambda j: w.swap("W", wn, c, p, j))
                if cols:
                    w.each(0, cols, lambda j: w.swap("X", self.out, c, p, j))
                if sign is not None:
                    w.set(sign, w.neg(w.get(sign)))

            w.when(w.differ(p, c), exchange)
            top = w.load("W", wn, c, c)

            def row(i):
                f = w.div(w.load("W", wn, i, c), top)
                w.each(w.plus(c, 1), n, lambda j: w.store("W", wn, i, j, w.sub(
                    w.load("W", wn, i, j), w.mul(f, w.load("W", wn, c, j)))))
                if cols:
                    w.each(0, cols, lambda j: w.store("X", self.out, i, j, w.sub(
                        w.load("X", self.out, i, j), w.mul(f, w.load("X", self.out, c, j)))))

            w.each(w.plus(c, 1), n, row)

        w.each(0, n, column)
        if self.kind == "det":
            total = w.var("det", w.get(sign))
            w.each(0, n, lambda c: w.set(total, w.mul(w.get(total), w.load("W", wn, c, c))))
            w.store("X", self.out, 0, 0, w.get(total))
            return

        self._solved(w, "W", wn, forward=False)


class _Ir:
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


class _C:
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
