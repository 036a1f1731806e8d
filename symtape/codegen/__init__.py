"""Compiling graphs to native code: plan -> LLVM IR -> object code (cached) -> callable.

The stages, each a module: :mod:`~symtape.codegen.plan` (graph -> SSA list),
:mod:`~symtape.codegen.lower` (the table of SymPy heads and low-level ops),
:mod:`~symtape.codegen.kernel` and :mod:`~symtape.codegen.loops` (LLVM IR text of straight-line
and loop plans, in the shell of :mod:`~symtape.codegen.ir`), :mod:`~symtape.codegen.jit` and
:mod:`~symtape.codegen.cache` (machine code, on-disk cache), :mod:`~symtape.codegen.runtime`
(the vectorised callable), :mod:`~symtape.codegen.archive` (its saved file and pickled state),
:mod:`~symtape.codegen.c99` and :mod:`~symtape.codegen.c_loops` (standalone C source of
straight-line and loop plans) and :mod:`~symtape.codegen.casadi_abi` (the same C behind
CasADi's external-function ABI).
"""

from __future__ import annotations

from symtape.codegen.runtime import CompiledFunction, TensorSpec, compile_atoms, compile_plan, load

__all__ = ["compile_atoms", "compile_plan", "CompiledFunction", "TensorSpec", "load"]
