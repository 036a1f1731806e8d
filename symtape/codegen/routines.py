"""Native routines: whole-matrix algorithms a loop-plan block runs once per index of its
space, written as loops in LLVM IR and in C (the same operations in the same order).

Gaussian elimination with partial pivoting (:class:`Routine`: ``solve``, ``inverse``,
``det``) does exactly what the element view of ``ops.linalg`` does on floats, pivot choice
included (the first row of largest magnitude; a number replaces a nan pivot), so compiled
code gives the same bits whether a matrix was unrolled or looped. Its cost is that of the
algorithm, ``n**3 / 3`` multiply-adds, not the ``n**3`` selects and atoms of an unrolled
view: an 80x80 solve plans in milliseconds. The LU (``lu``) is ``lu_factor``'s elimination
(eager values' bits); ``qr`` is LAPACK's unblocked Householder steps, ``eigh`` cyclic
Jacobi rotations and ``svd`` one-sided Jacobi rotations (within rounding of LAPACK's eager
values); the orderings sort lines
by a stable merge sort, and ``lower_bound``/``upper_bound`` bisect sorted lines.

A routine reads and writes through plain pointers, each matrix at compile-time row and
column strides (a transpose is read in place); it keeps its working copy of the matrix in a
scratch buffer (:attr:`Routine.work` elements, a temporary of the plan). Its steps are
written once, against a writer (``codegen.routine_writers``: IR or C).
"""

from __future__ import annotations

from typing import NamedTuple

from symtape.codegen.routine_writers import C, Ir

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
    "eigh": "the ascending eigenvalues and eigenvectors of A's lower triangle, packed",
    "svd": "the descending singular values and singular vectors of A (m x n), packed",
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
                                        + ("lu", "qr", "eigh", "svd") else ())

    @property
    def work(self) -> int:
        """The elements of the scratch line ``W``."""
        if self.kind == "qr":
            return self.m * self.n + self.n
        if self.kind == "svd":  # G (rows x cols), V (cols x cols), a column
            rows, cols = max(self.m, self.n), min(self.m, self.n)
            return rows * cols + cols * cols + rows
        return 2 * self.n if self.kind in ORDERINGS else self.n * self.n

    def ir(self, name: str, t: str) -> tuple:
        """``(lines, declarations)``: ``define internal void @<name>(ptr...)`` in float
        type ``t``."""
        w = Ir(t)
        self._steps(w)
        params = ", ".join(f"ptr noalias %{a}" for a in self.args)
        sfx = "f64" if t == "double" else "f32"
        head = [f"define internal void @{name}({params}) nounwind {{", "entry:"]
        return (head + w.allocas + w.lines + ["  ret void", "}", ""],
                {f"declare {t} @llvm.fabs.{sfx}({t})", f"declare {t} @llvm.sqrt.{sfx}({t})",
                 f"declare {t} @llvm.copysign.{sfx}({t}, {t})"})

    def c(self, name: str, ctype: str) -> list:
        """``static void <name>(...)``: the same steps in C."""
        w = C(ctype)
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
        if self.kind == "eigh":
            return self._jacobi(w)
        if self.kind == "svd":
            return self._svd(w)
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

        def factor():
            w.each(0, n, lambda i: w.each(0, n, lambda j: w.store(
                "X", lu, i, j, w.load("A", self.a, i, j))))
            w.each(0, n, lambda i: w.store("W", line, i, 0, w.to_float(i)))
            sign = w.var("sign", w.number(1.0))

            def column(k):
                p = _first_best(w, k, n, lambda i: w.fabs(w.load("X", lu, i, k)), w.wins)

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

        self._finite_or_nan(w, n, lambda i: n, 2 * n * n + 1, factor)

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
                big = _largest(w, w.plus(i, 1), m, lambda r: w.load("W", f, r, i))
                tau = w.var("tau", w.number(0.0))

                def reflector():
                    a, beta = w.var("alpha", alpha), w.var("beta")
                    knt = w.var("knt", 0)
                    w.set(beta, self._beta(w, f, i, m, big, a))

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
                        most = _largest(w, w.plus(i, 1), m, lambda r: w.load("W", f, r, i))
                        w.set(beta, self._beta(w, f, i, m, most, a))

                    w.when(w.differ(w.get(knt), 0), again)
                    b, al = w.get(beta), w.get(a)
                    w.set(tau, w.div(w.sub(b, al), b))
                    scal = w.div(w.number(1.0), w.sub(al, b))
                    w.each(w.plus(i, 1), m, lambda r: w.store(
                        "W", f, r, i, w.mul(w.load("W", f, r, i), scal)))
                    w.each(0, w.get(knt), lambda _: w.set(beta, w.mul(w.get(beta), safmin)))
                    w.store("W", f, i, i, w.get(beta))

                w.when(w.negate(w.is_zero(big)), reflector)
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

        self._finite_or_nan(w, m, lambda i: n, m * kq + kq * n, factor)

    #: Jacobi sweeps at most (a symmetric matrix converges in some 6-10).
    SWEEPS = 50

    def _jacobi(self, w) -> None:
        """Cyclic Jacobi rotations of the symmetric matrix whose lower triangle is ``A`` (in
        ``W``) until no off-diagonal element is left (Numerical Recipes' rotation; from the
        fifth sweep an element negligible beside both its diagonals is dropped), the
        rotations accumulated in the eigenvectors; then the eigenvalues ascending with
        their vectors, each vector signed so that its first component of largest magnitude
        is positive (``ops.decompositions.signed_vectors``, eager values' convention).
        Into ``X`` (a line at stride ``out[0]``): the eigenvalues, then the vectors as the
        columns of a row-major matrix. A matrix with a nan or an infinity gives nan."""
        n, s = self.n, self.out[0]
        f, vm = (n, 1), (n * s, s)

        def v_at(i, j):  # (the vectors' rows follow the eigenvalues' row of X)
            return w.plus(i, 1), j

        def solve():
            def copy(i):
                w.each(0, w.plus(i, 1), lambda j: (
                    w.store("W", f, i, j, w.load("A", self.a, i, j)),
                    w.store("W", f, j, i, w.load("A", self.a, i, j))))
            w.each(0, n, copy)
            w.each(0, n, lambda i: w.each(0, n, lambda j: w.store(
                "X", vm, *v_at(i, j), w.identity(i, j))))

            def sweep(k):
                off = w.var("off", w.number(0.0))
                w.each(0, n, lambda p: w.each(w.plus(p, 1), n, lambda q: w.set(
                    off, w.add(w.get(off), w.fabs(w.load("W", f, p, q))))))
                w.when(w.negate(w.is_zero(w.get(off))),
                       lambda: w.each(0, n, lambda p: w.each(
                           w.plus(p, 1), n, lambda q: self._rotate(w, f, vm, v_at, k, p, q))))

            w.each(0, self.SWEEPS, sweep)
            self._ascending(w, f, vm, v_at)

        self._finite_or_nan(w, n, lambda i: w.plus(i, 1), n + n * n, solve)  # (lower)

    def _rotate(self, w, f, vm, v_at, k, p, q) -> None:
        """The Jacobi rotation zeroing ``W[p, q]`` (and its mirror)."""
        n = self.n
        apq = w.load("W", f, p, q)
        app, aqq = w.load("W", f, p, p), w.load("W", f, q, q)
        g = w.mul(w.number(100.0), w.fabs(apq))
        negligible = w.both(w.below(3, k), w.both(
            w.is_zero(w.sub(w.add(w.fabs(app), g), w.fabs(app))),
            w.is_zero(w.sub(w.add(w.fabs(aqq), g), w.fabs(aqq)))))

        def drop():
            w.store("W", f, p, q, w.number(0.0))
            w.store("W", f, q, p, w.number(0.0))

        def turn():
            h = w.sub(aqq, app)
            small = w.is_zero(w.sub(w.add(w.fabs(h), g), w.fabs(h)))
            theta = w.div(w.mul(w.number(0.5), h), apq)
            far = w.div(w.number(1.0), w.add(w.fabs(theta), w.sqrt(w.add(
                w.number(1.0), w.mul(theta, theta)))))
            far = w.copysign(far, theta)
            t = w.select(small, w.div(apq, h), far)
            c = w.div(w.number(1.0), w.sqrt(w.add(w.number(1.0), w.mul(t, t))))
            sn = w.mul(t, c)
            tau = w.div(sn, w.add(w.number(1.0), c))
            shift = w.mul(t, apq)
            w.store("W", f, p, p, w.sub(app, shift))
            w.store("W", f, q, q, w.add(aqq, shift))
            drop()

            def mix(j):
                def both():
                    a, b = w.load("W", f, j, p), w.load("W", f, j, q)
                    na = w.sub(a, w.mul(sn, w.add(b, w.mul(a, tau))))
                    nb = w.add(b, w.mul(sn, w.sub(a, w.mul(b, tau))))
                    for r, c_, v in ((j, p, na), (p, j, na), (j, q, nb), (q, j, nb)):
                        w.store("W", f, r, c_, v)

                w.when(w.both(w.differ(j, p), w.differ(j, q)), both)
                a, b = w.load("X", vm, *v_at(j, p)), w.load("X", vm, *v_at(j, q))
                w.store("X", vm, *v_at(j, p), w.sub(a, w.mul(sn, w.add(b, w.mul(a, tau)))))
                w.store("X", vm, *v_at(j, q), w.add(b, w.mul(sn, w.sub(a, w.mul(b, tau)))))

            w.each(0, n, mix)

        w.branch(negligible, drop, lambda: w.when(w.negate(w.is_zero(apq)), turn))

    def _ascending(self, w, f, vm, v_at) -> None:
        """The eigenvalues (``W``'s diagonal) in ascending order with their vectors (a
        selection sort), written to ``X``; each vector signed (see :meth:`_jacobi`)."""
        n = self.n

        def place(i):
            k = _first_best(w, i, n, lambda j: w.load("W", f, j, j), w.less)

            def exchange():
                e_i = w.load("W", f, i, i)
                w.store("W", f, i, i, w.load("W", f, k, k))
                w.store("W", f, k, k, e_i)
                w.each(0, n, lambda r: w.swap("X", (vm[1], vm[0]), i, k, w.plus(r, 1)))

            w.when(w.differ(k, i), exchange)
            w.store("X", vm, 0, i, w.load("W", f, i, i))
            w.when(_leads_negative(w, n, lambda r: w.load("X", vm, *v_at(r, i))),
                   lambda: w.each(0, n, lambda r: w.store(
                       "X", vm, *v_at(r, i), w.neg(w.load("X", vm, *v_at(r, i))))))

        w.each(0, n, place)

    def _svd(self, w) -> None:
        """One-sided Jacobi (Hestenes): the columns of ``G`` (``A``, or ``A^T`` when it is
        wide, scaled by a power of two near 1) rotated pairwise until every pair is
        orthogonal to rounding, the rotations accumulated in ``V``; the singular values are
        the column norms, ``u`` the normalised columns (a zero column completed from the
        unit vectors), descending with their vectors, each pair signed so that ``v``'s
        first component of largest magnitude is positive (eager values' convention).
        Into ``X`` (a line at stride ``out[0]``): ``s``, ``u`` (m x k), ``v`` (n x k).
        ``W`` holds ``G`` (rows x cols), ``V`` (cols x cols) and a scratch column."""
        m0, n0 = self.m, self.n
        wide = n0 > m0
        rows, cols = (n0, m0) if wide else (m0, n0)  # G: rows x cols, cols <= rows
        k = cols
        g, vv = (cols, 1), (cols, 1)
        v_base = rows  # V's rows follow G's in W (row stride cols)
        spare = rows + cols  # then one column of rows (as a row of W, stride 1)

        def a_at(r, c):  # G[r, c] from A
            return w.load("A", self.a, c, r) if wide else w.load("A", self.a, r, c)

        def solve():
            most = w.var("most", w.number(0.0))
            w.each(0, rows, lambda r: w.each(0, cols, lambda c: w.set(most, w.select(
                w.wins(w.fabs(a_at(r, c)), w.get(most)), w.fabs(a_at(r, c)), w.get(most)))))
            scale = w.var("scale", w.number(1.0))  # a power of two: exact

            def rescale(_):  # (11 steps of 2**100 reach any double)
                w.when(w.less(w.exact(2.0 ** 100), w.mul(w.get(most), w.get(scale))),
                       lambda: w.set(scale, w.mul(w.get(scale), w.exact(2.0 ** -100))))
                w.when(w.both(w.less(w.mul(w.get(most), w.get(scale)), w.exact(2.0 ** -100)),
                              w.negate(w.is_zero(w.get(most)))),
                       lambda: w.set(scale, w.mul(w.get(scale), w.exact(2.0 ** 100))))

            w.each(0, 11, rescale)
            w.each(0, rows, lambda r: w.each(0, cols, lambda c: w.store(
                "W", g, r, c, w.mul(a_at(r, c), w.get(scale)))))
            w.each(0, cols, lambda i: w.each(0, cols, lambda j: w.store(
                "W", vv, w.plus(i, v_base), j, w.identity(i, j))))
            more = w.var("more", 1)

            def sweep(_):
                def pairs():
                    w.set(more, 0)
                    w.each(0, cols, lambda p: w.each(w.plus(p, 1), cols, lambda q: self._orth(
                        w, g, vv, v_base, rows, cols, p, q, more)))

                w.when(w.differ(w.get(more), 0), pairs)

            w.each(0, self.SWEEPS, sweep)
            self._singular(w, g, vv, v_base, spare, rows, cols, scale, wide)

        self._finite_or_nan(w, m0, lambda i: n0, k + m0 * k + n0 * k, solve)

    def _orth(self, w, g, vv, v_base, rows, cols, p, q, more) -> None:
        """The Jacobi rotation making columns ``p`` and ``q`` of ``G`` orthogonal, unless
        they are to rounding (``|g_p . g_q| <= eps |g_p| |g_q|``)."""
        sums = [w.var(t, w.number(0.0)) for t in ("al", "be", "ga")]

        def dot(r):
            a, b = w.load("W", g, r, p), w.load("W", g, r, q)
            for var, x in zip(sums, (w.mul(a, a), w.mul(b, b), w.mul(a, b))):
                w.set(var, w.add(w.get(var), x))

        w.each(0, rows, dot)
        al, be, ga = (w.get(v) for v in sums)
        eps = w.exact(2.0 ** -52 if w.t == "double" else 2.0 ** -23)
        done = w.either(w.is_zero(ga), w.less(w.fabs(ga), w.mul(eps, w.mul(
            w.sqrt(al), w.sqrt(be)))))

        def turn():
            w.set(more, 1)
            zeta = w.div(w.sub(be, al), w.mul(w.number(2.0), ga))
            za = w.fabs(zeta)
            big = w.less(w.number(1.0), za)
            inv = w.div(w.number(1.0), zeta)
            hyp = w.select(big, w.mul(za, w.sqrt(w.add(w.number(1.0), w.mul(inv, inv)))),
                           w.sqrt(w.add(w.number(1.0), w.mul(zeta, zeta))))
            t = w.copysign(w.div(w.number(1.0), w.add(za, hyp)), zeta)
            c = w.div(w.number(1.0), w.sqrt(w.add(w.number(1.0), w.mul(t, t))))
            sn = w.mul(c, t)

            def rotate(r, base):
                a, b = w.load("W", g, w.plus(r, base), p), w.load("W", g, w.plus(r, base), q)
                w.store("W", g, w.plus(r, base), p, w.sub(w.mul(c, a), w.mul(sn, b)))
                w.store("W", g, w.plus(r, base), q, w.add(w.mul(sn, a), w.mul(c, b)))

            w.each(0, rows, lambda r: rotate(r, 0))
            w.each(0, cols, lambda r: rotate(r, v_base))

        w.when(w.negate(done), turn)

    def _singular(self, w, g, vv, v_base, spare, rows, cols, scale, wide) -> None:
        """The column norms (unscaled), the normalised columns, zero ones completed, all
        in descending order, signed, written to ``X``."""
        k, s = cols, self.out[0]
        line = (s, 0)
        m0, n0 = self.m, self.n
        # X: s at [0, k), u (m0 x k) at k, v (n0 x k) at k + m0 * k
        x_u = (lambda r, j: w.plus(w.plus(w.times(r, k), j), k))
        x_v = (lambda r, j: w.plus(w.plus(w.times(r, k), j), k + m0 * k))
        left, right = (x_v, x_u) if wide else (x_u, x_v)  # G's columns, V's columns

        def norm(j):
            ss = w.var("ss", w.number(0.0))
            w.each(0, rows, lambda r: w.set(ss, w.add(w.get(ss), w.mul(
                w.load("W", g, r, j), w.load("W", g, r, j)))))
            w.store("X", line, j, 0, w.sqrt(w.get(ss)))

        w.each(0, k, norm)

        def place(i):  # (descending, a selection sort: the columns of G and V follow)
            at = _first_best(w, i, k, lambda j: w.load("X", line, j, 0),
                             lambda a, b: w.less(b, a))

            def exchange():
                si = w.load("X", line, i, 0)
                w.store("X", line, i, 0, w.load("X", line, at, 0))
                w.store("X", line, at, 0, si)
                w.each(0, rows + cols, lambda r: w.swap("W", (1, cols), i, at, r))

            w.when(w.differ(at, i), exchange)

        w.each(0, k, place)

        def unit(j):  # u_j = g_j / s_j, or a unit vector orthogonal to the others
            sj = w.load("X", line, j, 0)

            def scaled():
                w.each(0, rows, lambda r: w.store("X", line, left(r, j), 0, w.div(
                    w.load("W", g, r, j), sj)))

            def complete():
                found = w.var("found", 0)

                def candidate(c):
                    def attempt():
                        w.each(0, rows, lambda r: w.store("W", (1, 0), w.plus(
                            w.times(spare, cols), r), 0, w.identity(r, c)))
                        w.each(0, 2, lambda _: w.each(0, j, lambda i: self._project(
                            w, line, left, spare, cols, rows, i)))  # (twice: to rounding)
                        nn = w.var("nn", w.number(0.0))
                        w.each(0, rows, lambda r: w.set(nn, w.add(w.get(nn), w.mul(
                            self._spare(w, spare, cols, r), self._spare(w, spare, cols, r)))))
                        good = w.less(w.number(0.25), w.get(nn))

                        def take():
                            w.set(found, 1)
                            root = w.sqrt(w.get(nn))
                            w.each(0, rows, lambda r: w.store("X", line, left(r, j), 0, w.div(
                                self._spare(w, spare, cols, r), root)))

                        w.when(good, take)

                    w.when(w.negate(w.differ(w.get(found), 0)), attempt)

                w.each(0, rows, candidate)

            w.branch(w.is_zero(sj), complete, scaled)
            w.store("X", line, j, 0, w.div(sj, w.get(scale)))
            w.each(0, cols, lambda r: w.store("X", line, right(r, j), 0, w.load(
                "W", g, w.plus(r, v_base), j)))
            def flip():
                w.each(0, n0, lambda r: w.store("X", line, x_v(r, j), 0, w.neg(
                    w.load("X", line, x_v(r, j), 0))))
                w.each(0, m0, lambda r: w.store("X", line, x_u(r, j), 0, w.neg(
                    w.load("X", line, x_u(r, j), 0))))

            w.when(_leads_negative(w, n0, lambda r: w.load("X", line, x_v(r, j), 0)), flip)

        w.each(0, k, unit)

    @staticmethod
    def _spare(w, spare, cols, r) -> str:
        return w.load("W", (1, 0), w.plus(w.times(spare, cols), r), 0)

    def _project(self, w, line, left, spare, cols, rows, i) -> None:
        """The scratch column minus its part along ``u_i`` (``X``'s column ``i``)."""
        d = w.var("d", w.number(0.0))
        w.each(0, rows, lambda r: w.set(d, w.add(w.get(d), w.mul(
            w.load("X", line, left(r, i), 0), self._spare(w, spare, cols, r)))))
        w.each(0, rows, lambda r: w.store("W", (1, 0), w.plus(w.times(spare, cols), r), 0,
                                          w.sub(self._spare(w, spare, cols, r), w.mul(
                                              w.get(d), w.load("X", line, left(r, i), 0)))))

    def _finite_or_nan(self, w, rows: int, cols_of, size: int, solve) -> None:
        """``solve()`` when the elements of ``A`` read (row ``i``'s first ``cols_of(i)``)
        are all finite, else ``X`` (``size`` elements at stride ``out[0]``) all nan -- the
        factors ``Decomposition.numeric`` gives such a matrix (TensorFlow's)."""
        bad = w.var("bad", 0)
        w.each(0, rows, lambda i: w.each(0, cols_of(i), lambda j: w.set(bad, w.select_index(
            w.finite(w.load("A", self.a, i, j)), w.get(bad), 1))))
        w.branch(w.differ(w.get(bad), 0), lambda: w.each(0, size, lambda e: w.store(
            "X", (self.out[0], 0), e, 0, w.nan())), solve)

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


def _first_best(w, first, end: int, key, beats) -> str:
    """The index in ``first..end-1`` whose ``key`` beats (``beats(candidate, best)``) every
    earlier one's: a pivot's row, the least eigenvalue left (the first on ties)."""
    at, best = w.var("at", first), w.var("best", key(first))

    def look(i):
        value = key(i)
        take = beats(value, w.get(best))
        w.set(best, w.select(take, value, w.get(best)))
        w.set(at, w.select_index(take, i, w.get(at)))

    w.each(w.plus(first, 1), end, look)
    return w.get(at)


def _largest(w, first, end: int, value_of) -> str:
    """The largest magnitude among ``value_of(i)`` for ``i`` in ``first..end-1`` (0 for
    none; a nan wins, as numpy's ``argmax`` has it)."""
    most = w.var("most", w.number(0.0))

    def look(i):
        size = w.fabs(value_of(i))
        w.set(most, w.select(w.wins(size, w.get(most)), size, w.get(most)))

    w.each(first, end, look)
    return w.get(most)


def _leads_negative(w, count: int, value_of) -> str:
    """Whether the first of ``value_of(0..count-1)`` of largest magnitude is negative: a
    vector's sign to turn (``ops.decompositions.signed_vectors``' rule)."""
    lead = _first_best(w, 0, count, lambda r: w.fabs(value_of(r)), w.wins)
    return w.less(value_of(lead), w.number(0.0))
