"""The one-line notice while kernels compile on first use (no real compilation)."""

import logging
import time
from types import SimpleNamespace

import pytest

from skfed.utils import _compile_notice


def _event(module):
    def f():
        pass

    f.__module__ = module
    return SimpleNamespace(data={"dispatcher": SimpleNamespace(py_func=f), "args": ()})


@pytest.fixture
def notice(monkeypatch):
    monkeypatch.setattr(_compile_notice, "NOTICE_AFTER_S", 0.05)
    return _compile_notice._Notice()


def _compile(state, seconds, module="skfed.gaussian_process._kernels"):
    outer, inner = _event(module), _event("numba.np.arrayobj")
    state.on_start(outer)
    state.on_start(inner)  # a numba-internal compilation nested in ours
    time.sleep(seconds)
    state.on_end(inner)
    state.on_end(outer)


def _notices(caplog):
    return [r for r in caplog.records
            if r.name == "skfed" and r.getMessage() == _compile_notice.MESSAGE]


def test_long_compilation_gives_one_notice(notice, caplog):
    caplog.set_level(logging.WARNING, logger="skfed")
    _compile(notice, 0.3)
    assert len(_notices(caplog)) == 1
    assert _notices(caplog)[0].levelno == logging.WARNING
    _compile(notice, 0.3)  # once per process
    time.sleep(0.1)
    assert len(_notices(caplog)) == 1


def test_short_or_foreign_compilation_is_silent(notice, caplog):
    caplog.set_level(logging.WARNING, logger="skfed")
    _compile(notice, 0.0)  # over before the timer runs out, then idle
    time.sleep(0.2)
    _compile(notice, 0.3, module="user_module")  # not an skfed kernel
    time.sleep(0.1)
    assert not _notices(caplog)


def test_installed_once_by_the_kernel_modules():
    import numpy as np

    from skfed.tensor._kernels import row_norms

    state = _compile_notice._state
    assert state is not None and _compile_notice.install() is state
    row_norms(np.ones((3, 2)))  # compiled or loaded: the listener is balanced after
    assert state.depth == 0
