"""Keras optimizers: ``SGD``, ``Adam`` and ``RMSprop`` (``symtape.optimizers``)."""

from __future__ import annotations

from ..optimizers import SGD, Adam, RMSprop

__all__ = ["SGD", "Adam", "RMSprop"]
