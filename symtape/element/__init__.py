"""The element level: SymPy heads, the hash-consed DAG of definitions and its numpy interpreter."""
