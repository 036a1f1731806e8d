"""symtape: exact symbolic derivatives behind TensorFlow's ``GradientTape`` API, compiled to
native code.

>>> import symtape as st
>>> x = st.Variable(3.0, name="x")
>>> with st.GradientTape() as tape:
...     y = x ** 3
>>> dy = tape.gradient(y, x)
>>> float(dy), dy.formula()
(27.0, 3*x**2)
"""

from __future__ import annotations

from symtape.base import errors
from symtape.ops import random
from symtape import math as math
from symtape.derivatives.custom import (
    RegisterGradient, custom_gradient, define_function, get_function, register_gradient,
    stop_gradient,
)
from symtape.compile.function import Function, SparseResult, TensorSpec, compile, function
from symtape.compile.transforms import derivative, export_c, grad, hessian, hvp, jacobian
from symtape.interop import from_sympy
from symtape.teaching import TaylorSeries, plot, taylor
from symtape.math import *  # noqa: F403 - TensorFlow exposes its math names at the top level
from symtape.module import Module
from symtape.serialize import load
from symtape.derivatives.tape import GradientTape, UnconnectedGradients
from symtape.control_flow import (
    cond, custom_linear_solve, custom_root, map_fn, scan, vectorized_map, while_loop,
)
from symtape.core.variables import (
    Tensor, Variable, constant, convert_to_tensor, is_tensor, name_scope, symbol,
)
from symtape import config, keras, linalg, nn, optimizers, saved_model, scipy, testing

float64 = "float64"
float32 = "float32"
int32 = "int32"
int64 = "int64"
bool_ = "bool"

__version__ = "0.1.0"

__all__ = [  # noqa: F405
    "GradientTape", "UnconnectedGradients", "Tensor", "Variable", "constant", "symbol",
    "convert_to_tensor", "is_tensor", "custom_gradient", "register_gradient",
    "RegisterGradient", "define_function", "get_function", "stop_gradient", "errors", "math",
    "nn", "linalg", "random", "optimizers", "saved_model", "testing", "compile", "function",
    "Function", "grad", "jacobian", "hessian", "hvp", "derivative", "TensorSpec", "SparseResult",
    "load", "Module", "name_scope", "keras", "export_c", "from_sympy", "taylor", "TaylorSeries",
    "plot", "scipy", "config", "scan", "while_loop", "cond", "map_fn", "vectorized_map",
    "custom_root", "custom_linear_solve",
    *math.__all__,
]
