"""Ground level: errors, lazy imports, nested structures and the tape stack."""
