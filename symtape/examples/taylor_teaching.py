"""Teaching higher derivatives: the Taylor series of tanh to order 11 with exact
coefficients (Taylor mode, not nested differentiation), checked against ``sympy.series``;
a LaTeX table of the first derivatives; and, with matplotlib installed, a plot of
``exp(sin(x))`` with its first three derivatives saved to ``taylor_plot.png`` in the
temporary folder (or the path given).

    python -m symtape examples taylor_teaching
"""

import os
import sys
import tempfile
import time

import sympy as sp

import symtape as st

t = time.perf_counter()
series = st.taylor(st.tanh, 0, 11)
print(f"tanh to order 11 in {time.perf_counter() - t:.2f} s:")
print("  coefficients:", series.coefficients)
x = sp.Symbol("x")
reference = sp.series(sp.tanh(x), x, 0, 12).removeO()
assert sp.expand(series.polynomial() - reference) == 0
print("  equal to sympy.series:", series.polynomial())
print("  the 11th derivative at 0:", series.derivatives()[-1])

print(st.taylor(lambda v: st.exp(st.sin(v)), sp.pi, 3).latex_table())

try:
    import matplotlib

    matplotlib.use("Agg")
except ImportError:
    print('(pip install "symtape[plot]" to draw the plot)')
else:
    ax = st.plot(lambda v: st.exp(st.sin(v)), (-3.0, 3.0), derivatives=3)
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.gettempdir(),
                                                               "taylor_plot.png")
    ax.figure.savefig(path, dpi=100)
    print(f"saved {path}")
