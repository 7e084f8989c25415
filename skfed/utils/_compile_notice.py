"""A one-line notice while skfed's numba kernels compile on first use.

The kernels are compiled once per install and environment, then loaded from numba's
on-disk cache. A cold cache is detected by what actually happens: numba fires a
``"numba:compile"`` event for every compilation (a kernel loaded from the cache fires
none), so a listener on that event costs nothing on a warm cache. On the first
compilation of an skfed kernel the listener arms a timer; if compilation is still going
on when it runs out (``NOTICE_AFTER_S``), it logs one line at WARNING level to the
``"skfed"`` logger (shown on stderr when logging is not configured)::

    skfed: compiling numerical kernels on first use (once per install, up to about 45 s
    on 2 cores)...

``logging.getLogger("skfed").setLevel(logging.ERROR)`` silences it. The notice is given
at most once per process. The kernel modules call :func:`install` when imported.
"""

import logging
import threading
import time

__all__ = ["install", "MESSAGE"]

_logger = logging.getLogger("skfed")

#: seconds of compilation before the notice (short compilations, such as one new type
#: variant on a warm cache, stay silent)
NOTICE_AFTER_S = 3.0

#: measured by ``benchmarks/speed/cold_start.py`` (doc/performance.md, "Cold start")
MESSAGE = ("skfed: compiling numerical kernels on first use (once per install, up to "
           "about 45 s on 2 cores)...")


class _Notice:
    """State of the listener: nesting depth of compilations, seconds, the timer."""

    def __init__(self):
        self.lock = threading.Lock()
        self.depth = 0
        self.started = 0.0  # start of the current outermost compilation
        self.busy = 0.0  # compile seconds since the timer was armed (finished ones)
        self.timer = None
        self.done = False

    @staticmethod
    def _ours(event):
        disp = event.data.get("dispatcher") if isinstance(event.data, dict) else None
        module = getattr(getattr(disp, "py_func", None), "__module__", "") or ""
        return module.startswith("skfed.")

    def on_start(self, event):
        if self.done or (self.depth == 0 and not self._ours(event)):
            return
        with self.lock:
            if self.depth == 0:
                self.started = time.perf_counter()
                if self.timer is None:
                    self.busy = 0.0
                    self.timer = threading.Timer(NOTICE_AFTER_S, self.fire)
                    self.timer.daemon = True
                    self.timer.start()
            self.depth += 1

    def on_end(self, event):
        if self.depth == 0:  # not ours (or started before the notice was done)
            return
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                self.busy += time.perf_counter() - self.started

    def fire(self):
        with self.lock:
            busy = self.busy + (time.perf_counter() - self.started if self.depth else 0.0)
            self.timer = None
            if self.done or busy < 0.5 * NOTICE_AFTER_S:
                return  # mostly idle since armed: the next compilation arms again
            self.done = True
        _logger.warning(MESSAGE)


_state = None


def install():
    """Register the listener on numba's compile events (once per process)."""
    global _state
    if _state is not None:
        return _state
    from numba.core import event

    class _Listener(event.Listener):
        def on_start(self, ev):
            state.on_start(ev)

        def on_end(self, ev):
            state.on_end(ev)

    state = _Notice()
    event.register("numba:compile", _Listener())
    _state = state
    return state
