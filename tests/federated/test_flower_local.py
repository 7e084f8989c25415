"""LocalFederation's process hygiene (no Flower needed)."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from skfed.federated._flower_local import LocalFederation

CHILD = textwrap.dedent("""
    import subprocess, time
    from skfed.federated._flower_local import _die_with_parent
    p = subprocess.Popen(["sleep", "120"], start_new_session=True, preexec_fn=_die_with_parent)
    print(p.pid, flush=True)
    time.sleep(120)
""")


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux only")
def test_started_processes_die_with_a_killed_parent():
    """A test run that is killed (not just failed) leaves no SuperLink or SuperNode behind."""
    parent = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)
    try:
        os.kill(child, 9)
    except ProcessLookupError:
        pass


def test_auth_needs_tls(tmp_path):
    with pytest.raises(ValueError, match="auth=True needs tls"):
        LocalFederation(tmp_path, [{"client-id": 0}], tls=None, auth=True)


def test_unreachable_superlink_is_named_and_nothing_stays_running(tmp_path):
    """A run submitted to a SuperLink that is gone: an error naming its address."""
    pytest.importorskip("flwr")
    import signal

    from skfed.federated.flower import write_app

    app = write_app(tmp_path / "app", "server_app = client_app = None\n")
    with LocalFederation(tmp_path / "federation", [{"client-id": 0}], tls=None,
                         auth=False) as fed:  # insecure: a quick trial
        superlink = fed.procs[0]
        os.killpg(superlink.pid, signal.SIGTERM)
        superlink.wait(timeout=30)
        with pytest.raises(ConnectionError, match=f"SuperLink at 127.0.0.1:{fed.port}"):
            fed.run(app, {"min-nodes": 1})
    assert all(proc.poll() is not None for proc in fed.procs)
