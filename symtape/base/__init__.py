"""Ground level: errors, lazy imports, nested structures, the tape stack and shared flat
places."""
