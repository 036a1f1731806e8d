"""The core below the op table: tensor-level nodes, the primitive protocol, application and leaves."""
