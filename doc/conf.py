"""Sphinx configuration of the skfed documentation.

Build from the repository root (after ``pip install -e ".[doc]"``)::

    sphinx-build -W -j 1 -b html doc doc/_build/html

``SKFED_DOC_QUICK=1`` makes the gallery examples run on smaller data and
fewer rounds (the test suite's build, ``tests/test_site.py``); the pictures
keep their layout, the numbers are rougher.
"""

import os
import re
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "skfed").is_dir():
    # document (and run the examples of) the checkout being built, not an installed copy
    sys.path.insert(0, str(ROOT))

import skfed  # noqa: E402

project = "skfed"
author = "skfed developers"
copyright = "skfed developers, BSD-3-Clause"
release = skfed.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py",
                    "auto_examples/*.md5", "auto_examples/*.json", "auto_examples/*.zip"]
templates_path = ["_templates"]

# -- autodoc / autosummary / numpydoc ----------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": False, "inherited-members": False}
autodoc_typehints = "none"
numpydoc_show_class_members = False  # the class template lists the methods
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
add_module_names = True  # signatures show the import path

# -- MyST (the Markdown pages of doc/) ---------------------------------------
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
# The Markdown pages (also read on GitHub) skip heading levels in places.
suppress_warnings = ["myst.header"]

# -- sphinx-gallery ----------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"__init__\.py|/_",
    "doc_module": ("skfed",),
    "backreferences_dir": "gen_modules/backreferences",
    "reference_url": {"skfed": None},
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "matplotlib_animations": False,
    "min_reported_time": 1,
    "abort_on_example_error": True,
}

# -- HTML --------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"skfed {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_show_sourcelink = False
html_theme_options = {
    "github_url": None,
    "navbar_align": "left",
    "header_links_before_dropdown": 7,
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_sidebars = {"index": [], "getting_started": [], "changelog": []}

_TYPE_LINE = re.compile(r"^(\s*[\w*, ]+ : )(.+)$")
_MARKUP = re.compile(r"(\*|(?<=\w)_(?=\W|$))")


def _escape_type_fields(app, what, name, obj, options, lines):
    """Keep numpydoc type fields literal text.

    Types such as ``ndarray of shape (n_clients, *coef_shape_)`` are plain
    text in the docstrings (as ``help()`` shows them); in reST, ``*`` starts
    emphasis and a trailing ``_`` makes a link, so escape both before numpydoc
    parses the docstring.
    """
    for i, line in enumerate(lines):
        match = _TYPE_LINE.match(line)
        if match and "``" not in match.group(2):
            lines[i] = match.group(1) + _MARKUP.sub(r"\\\1", match.group(2))


_SKLEARN_ROLE = re.compile(r":(?:ref|term):`([^`<]*?)\s*(?:<([^>]*)>)?`")


def _unlink_sklearn_roles(app, what, name, obj, options, lines):
    """Methods inherited from scikit-learn (``score``, ``set_fit_request``, ...)
    cite labels of scikit-learn's own site; show their text instead."""
    if getattr(obj, "__module__", "").startswith("sklearn"):
        lines[:] = [_SKLEARN_ROLE.sub(lambda m: m.group(1) or m.group(2), line)
                    for line in lines]


def setup(app):
    app.connect("autodoc-process-docstring", _escape_type_fields, priority=400)
    app.connect("autodoc-process-docstring", _unlink_sklearn_roles, priority=400)


warnings.filterwarnings("ignore", category=UserWarning,
                        message="Matplotlib is currently using agg")
