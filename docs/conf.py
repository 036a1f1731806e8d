"""Sphinx configuration of symtape's documentation: the guide pages are Markdown (MyST), the
API reference comes from the docstrings (shown as written, doctests included).

    pip install -e ".[docs]" && sphinx-build -W -b html docs docs/_build/html
"""

project = "symtape"
author = "The symtape authors"
copyright = "2026, The symtape authors"  # noqa: A001 - Sphinx's name

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3  # links to sections: page.md#section-title
html_theme = "alabaster"
html_title = "symtape"
autodoc_typehints = "none"
autodoc_member_order = "bysource"


def _as_written(app, what, name, obj, options, lines):
    """Docstrings are plain text with doctests, not reStructuredText: shown as written."""
    if lines:
        lines[:] = ["::", ""] + ["    " + line for line in lines] + [""]


def setup(app):
    app.connect("autodoc-process-docstring", _as_written)
