"""Data-only encodings and bounded file reads."""
