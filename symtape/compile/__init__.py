"""Compiling programs: the loop-nest planner, batch splitting, ``Function`` and the transforms."""
