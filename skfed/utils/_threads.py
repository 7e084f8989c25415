"""Thread-safe changes of process-wide state (``sys.stdout``, the warning filters).

``contextlib.redirect_stdout`` and ``warnings.catch_warnings`` swap state that
every thread shares. Two fits running on threads (joblib's threading
backend, ``cross_validate(..., n_jobs=4)`` under it) would each restore the
state the other one found: ``sys.stdout`` left pointing at a buffer, an
"ignore" filter left in ``warnings.filters`` for the rest of the session.
Every such block of skfed runs under :data:`STATE_LOCK`, so each one
restores the state it found; blocks of other threads wait (a block nested in
another one of the same thread does not). A block must not wait on another thread that
could enter such a block (it would deadlock): keep thread pools out of them.
"""

import contextlib
import threading
import warnings

__all__ = ["STATE_LOCK", "quiet_warnings", "redirect_stdout"]

#: serializes skfed's changes of ``sys.stdout`` and of the warning filters
STATE_LOCK = threading.RLock()


@contextlib.contextmanager
def redirect_stdout(target):
    """:func:`contextlib.redirect_stdout` under :data:`STATE_LOCK`."""
    with STATE_LOCK, contextlib.redirect_stdout(target):
        yield target


@contextlib.contextmanager
def quiet_warnings(*categories):
    """Ignore warnings of ``categories`` (all warnings if none) in the block.

    :func:`warnings.catch_warnings` under :data:`STATE_LOCK`: the filters are
    restored as the block found them.
    """
    with STATE_LOCK, warnings.catch_warnings():
        for category in categories or (Warning,):
            warnings.simplefilter("ignore", category)
        yield
