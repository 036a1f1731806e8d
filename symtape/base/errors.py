"""The symtape exception hierarchy.

Every error a user can provoke is one of these (or the builtin type TensorFlow raises for the
same mistake, which these subclass), and its message names the op, the argument and the fix.
:class:`CacheWarning` is the one warning: the on-disk code cache was found unsafe (another
owner, open permissions) and is not used.
"""

from __future__ import annotations

__all__ = [
    "SymtapeError",
    "InvalidArgumentError",
    "ShapeError",
    "DTypeError",
    "UnboundLeafError",
    "NonDifferentiableError",
    "LoweringError",
    "CompileError",
    "CacheError",
    "SerializationError",
    "MissingDependencyError",
    "CacheWarning",
]


class SymtapeError(Exception):
    """Base class of every symtape error."""


class InvalidArgumentError(SymtapeError, ValueError):
    """An argument has an invalid value (TensorFlow's ``InvalidArgumentError``)."""


class ShapeError(InvalidArgumentError):
    """Shapes of arguments are incompatible with the op."""


class DTypeError(SymtapeError, TypeError):
    """An argument has a dtype the op does not accept."""


class UnboundLeafError(SymtapeError, ValueError):
    """A numeric value was requested from a tensor depending on a leaf with no bound value."""


class NonDifferentiableError(SymtapeError, LookupError):
    """A derivative was requested that is not defined (TensorFlow raises ``LookupError``)."""


class LoweringError(SymtapeError, NotImplementedError):
    """A SymPy head in the graph has no lowering to native code."""


class CompileError(SymtapeError, RuntimeError):
    """Native compilation failed."""


class CacheError(SymtapeError, OSError):
    """The on-disk object-code cache could not be used."""


class SerializationError(SymtapeError, ValueError):
    """A saved file is malformed or incompatible."""


class MissingDependencyError(SymtapeError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class CacheWarning(SymtapeError, UserWarning):
    """The on-disk code cache is not used: its folder or key file is not private to this user
    (another owner, or writable by group or others). Compiling still works, uncached."""
