"""Derivatives over recorded programs: the reverse sweep, substitution rules, sparsity, Taylor mode and the tape."""
