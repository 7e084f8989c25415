"""The benchmark's fit times leave the first (compiling) run of a configuration out."""

from skfed.benchmark._timing import timed


class Counter:
    def __init__(self, tag):
        self.tag, self.calls = tag, 0

    def __repr__(self):
        return f"Counter({self.tag!r})"

    def fit(self):
        self.calls += 1
        return self.calls


def test_first_run_of_a_configuration_is_untimed():
    a = Counter("timing-test-a")
    seconds, result = timed(a, a.fit)
    assert a.calls == 2 and result == 2 and seconds >= 0  # warm-up, then the timed run
    b = Counter("timing-test-a")  # the same configuration: already warm in this process
    timed(b, b.fit)
    assert b.calls == 1
    c = Counter("timing-test-c")
    timed(c, c.fit)
    assert c.calls == 2
