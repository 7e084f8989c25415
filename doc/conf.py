"""Sphinx configuration of the skfed documentation.

Build from the repository root (after ``pip install -e ".[doc]"``)::

    sphinx-build -W -j 1 -b html doc doc/_build/html

``SKFED_DOC_QUICK=1`` makes the gallery examples run on smaller data and
fewer rounds (the test suite's build, ``tests/test_site.py``); the pictures
keep their layout, the numbers are rougher.
"""

import importlib
import inspect
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

# -- API pages, one per module, generated from ``__all__`` -------------------
# A public name added to a module's ``__all__`` gets its page without editing
# the documentation; a new module is listed with its docstring's first line.
API_MODULES = {
    "baselines": ("Baselines", "Reference models with the skfed API: one model per site, one "
                  "pooled model, federated averaging, a linear mixed model."),
    "gaussian_process": ("Personalized federated Gaussian processes",
                         "pFedHGP: a shared global GP, a client deviation GP and a local GP "
                         "per site, with calibrated predictive uncertainty."),
    "linear_model": ("Federated linear classifiers",
                     "DP-Fed DRO (differentially private, Wasserstein distributionally "
                     "robust, ADMM) and the baselines of its paper."),
    "tensor": ("Personalized federated tensor regression",
               "A shared low-Tucker-rank coefficient plus sparse site deviations, with "
               "differential privacy; baselines and Tucker tools."),
    "datasets": ("Data sets", "Real grouped data sets (offline, from R packages) and the "
                 "generators of the papers' simulations."),
    "metrics": ("Metrics and scorers", "Scorers that send the test rows' ``groups`` to "
                "``predict``; metrics for predictive distributions."),
    "model_selection": ("Model selection", "Cross-validation that holds out rows within "
                        "every site."),
    "preprocessing": ("Preprocessing", "Transformers that bound the rows' norms, as "
                      "differential privacy needs."),
    "privacy": ("Differential privacy", "The Gaussian mechanism, privacy budgets, "
                "accountants and noise calibration."),
    "federated": ("The federated protocol", "Federation, client and server steps, the engine "
                  "that runs the rounds and the ledger of every message."),
    "federated.flower": ("Flower", "An estimator's own client and server steps on a Flower "
                         "federation (SuperLink and SuperNodes); the ``flower`` extra, see "
                         ":doc:`/flower`."),
    "benchmark": ("Benchmark", "The experiments of ``skfed benchmark`` and the code that runs "
                  "them."),
    "utils": ("Utilities", "Validation of client labels."),
    "base": ("Base classes", "The base class that owns ``fit`` for every federated estimator "
             "(see :doc:`/extending`), and the mixin of the ``groups`` API."),
}
API_CONSTANTS = {
    "MULTILEVEL_DATASETS": "The names accepted by :func:`load_multilevel`.",
    "ACCOUNTANTS": "The dp-accounting accountants of :func:`calibrate_noise_multiplier` and "
                   ":func:`epsilon_spent`.",
    "PFTR_ACCOUNTANTS": "The values of ``PersonalizedTensorRegressor(accountant=...)``: "
                        "``\"paper\"`` and those of :data:`ACCOUNTANTS`.",
    "MODES": "The run modes of :func:`run_benchmark`.",
    "TRUSTED_TYPES": "The skfed types (estimators and their fitted parts) that "
                     ":func:`load_fitted` may build from a skops file, besides numpy's and "
                     "scikit-learn's; it runs no code of the file.",
}


def _public_modules():
    names = sorted(p.parent.name for p in (Path(skfed.__file__).parent).glob("*/__init__.py")
                   if not p.parent.name.startswith("_")) + ["base", "federated.flower"]
    order = list(API_MODULES) + [n for n in names if n not in API_MODULES]
    modules = [importlib.import_module(f"skfed.{name}") for name in order if name in names]
    return [m for m in modules if hasattr(m, "__all__")]


def _api_page(module):
    short = module.__name__.split(".", 1)[1]
    first_line = (module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else short
    title, description = API_MODULES.get(short, (first_line.rstrip("."), first_line))
    heading = f"``{module.__name__}``: {title}"
    lines = [f".. _api-{short}:", "", heading, "=" * len(heading), "",
             f".. module:: {module.__name__}", "", description, "",
             f".. currentmodule:: {module.__name__}", ""]
    objects = {name: getattr(module, name) for name in module.__all__}
    classes = [n for n, o in objects.items() if inspect.isclass(o)]
    functions = [n for n, o in objects.items() if not inspect.isclass(o) and callable(o)]
    for label, names in (("Classes", classes), ("Functions", functions)):
        if names:
            lines += [f".. rubric:: {label}", "", ".. autosummary::", "   :toctree: generated/",
                      "   :nosignatures:", ""] + [f"   {n}" for n in sorted(names)] + [""]
    for name, value in objects.items():
        if name not in classes and name not in functions:
            # a set's repr follows the hash seed: its size instead, for a reproducible page
            shown = ([] if isinstance(value, (set, frozenset))
                     else [f"   :value: {value!r}"])
            lines += [f".. data:: {name}"] + shown + [
                "", f"   {API_CONSTANTS.get(name, 'A constant of ' + module.__name__ + '.')}", ""]
    return short, title, description, "\n".join(lines)


def _write_if_changed(path, text):
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _write_api_pages():
    here = Path(__file__).resolve().parent
    (here / "api").mkdir(exist_ok=True)
    rows, toc = [], []
    for module in _public_modules():
        short, title, description, text = _api_page(module)
        _write_if_changed(here / "api" / f"{short}.rst", text)
        rows += [f"   * - :doc:`{module.__name__} <api/{short}>`", f"     - {description}"]
        toc.append(f"   api/{short}")
    index = (here / "_templates" / "api_index.rst").read_text()
    index = index.replace("{{ modules }}", "\n".join(rows)).replace("{{ toctree }}", "\n".join(toc))
    _write_if_changed(here / "api.rst", index)


_write_api_pages()

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
    if (getattr(obj, "__module__", None) or "").startswith("sklearn"):
        lines[:] = [_SKLEARN_ROLE.sub(lambda m: m.group(1) or m.group(2), line)
                    for line in lines]


def setup(app):
    app.connect("autodoc-process-docstring", _escape_type_fields, priority=400)
    app.connect("autodoc-process-docstring", _unlink_sklearn_roles, priority=400)


warnings.filterwarnings("ignore", category=UserWarning,
                        message="Matplotlib is currently using agg")
