"""Start a Flower SuperLink and SuperNodes on this machine (127.0.0.1).

For trying an app before deploying it, and for the tests and benchmarks of
:mod:`skfed.federated.flower`: :class:`LocalFederation` starts the processes
(optionally over TLS, see :func:`make_certificates`), submits runs with
``flwr run`` and stops every process it started, also on failure.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

__all__ = ["LocalFederation", "make_certificates", "write_app"]

BIN = Path(sys.executable).parent


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    """In the child (Linux): get SIGTERM if this process dies without cleaning up.

    The processes run in their own sessions (so that a whole process group can
    be stopped), hence they would outlive a killed parent otherwise.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _env(flwr_home):
    env = dict(os.environ)
    env["FLWR_HOME"] = str(flwr_home)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # superlink spawns flower-superexec
    env["PYTHONUNBUFFERED"] = "1"
    return env


def write_app(app_dir, module_source, config=None, name="skfedapp"):
    """Write a Flower app directory whose components live in ``<name>/app.py``.

    Parameters
    ----------
    app_dir : path
        Directory to create (``flwr run`` bundles all of it).
    module_source : str
        Source of ``app.py``; it must define ``server_app`` and
        ``client_app`` (e.g. from :class:`FlowerFederation`).
    config : dict or None, default=None
        Run-config keys the app accepts, with their defaults (Flower refuses
        undeclared keys); ``min-nodes``, ``output``, ``scores-output`` and
        ``sites`` are always declared.
    name : str, default="skfedapp"
        Package name of the app.

    Returns
    -------
    app_dir : Path
    """
    config = {"min-nodes": 1, "output": "", "scores-output": "", "sites": "", **(config or {})}
    config_lines = "\n".join(f"{k} = {_toml_value(v)}" for k, v in config.items())
    app_dir = Path(app_dir)
    (app_dir / name).mkdir(parents=True, exist_ok=True)
    (app_dir / name / "__init__.py").write_text("")
    (app_dir / name / "app.py").write_text(textwrap.dedent(module_source))
    (app_dir / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["hatchling"]
        build-backend = "hatchling.build"

        [project]
        name = "{name}"
        version = "0.1.0"
        description = "skfed test app"
        license = "BSD-3-Clause"
        dependencies = []

        [tool.hatch.build.targets.wheel]
        packages = ["."]

        [tool.flwr.app]
        publisher = "skfed"

        [tool.flwr.app.components]
        serverapp = "{name}.app:server_app"
        clientapp = "{name}.app:client_app"

        [tool.flwr.app.config]
        """) + config_lines + "\n")
    return app_dir


class LocalFederation:
    """A SuperLink and SuperNodes on 127.0.0.1; stops every process it started.

    A context manager: entering starts ``flower-superlink`` on a free port
    and one ``flower-supernode`` per node config, leaving stops them all
    (SIGTERM, then SIGKILL after 15 s). Logs go to ``workdir/*.log``. By
    default the federation runs as a deployment should: over TLS, with
    SuperNode authentication.

    Parameters
    ----------
    workdir : path
        Where the logs, the Flower homes, the certificates and the keys are
        written.
    node_configs : list of dict
        One node config per SuperNode (e.g. ``{"client-id": 0,
        "data-path": "..."}``), read by the app's ``load_data``.
    tls : "auto", dict or None, default="auto"
        ``"auto"`` makes a test CA and a certificate for 127.0.0.1 in
        ``workdir/tls`` (:func:`make_certificates`); a dict gives ``{"ca",
        "cert", "key"}`` PEM paths; ``None`` runs insecure (a quick local
        trial only: anyone on the machine can join or listen).
    auth : bool, default=True
        Switch on SuperNode authentication (needs ``tls``): the SuperLink
        accepts only SuperNodes whose public keys were registered with
        ``flwr supernode register``; each SuperNode gets its own EC P-384
        key pair (OpenSSH format) in ``workdir/keys``.

    Attributes
    ----------
    node_ids : list of int or None
        With ``auth``, the SuperNode id the SuperLink gave each registered
        key, in the order of ``node_configs``: the ``sites`` allow-list of
        :class:`~skfed.federated.flower.FlowerFederation` binds each label
        to its node with them.

    Examples
    --------
    >>> from skfed.federated.flower import LocalFederation, write_app
    >>> with LocalFederation("/tmp/fl", [{"client-id": 0}]) as fed:  # doctest: +SKIP
    ...     done = fed.run(write_app("/tmp/fl/app", APP_SOURCE), {"min-nodes": 1})
    """

    def __init__(self, workdir, node_configs, tls="auto", auth=True):
        if auth and not tls:
            raise ValueError("auth=True needs tls: SuperNode authentication runs over TLS "
                             "(pass tls='auto', or auth=False for an insecure trial).")
        self.workdir = Path(workdir)
        self.node_configs = node_configs
        self.tls = tls
        self.auth = auth
        self.home = self.workdir / "flwr-home"
        self.cli_home = self.workdir / "flwr-cli-home"
        self.port = _free_port()
        self.procs = []
        self.nodes = []
        self.node_ids = [] if auth else None

    def _spawn(self, args, log_name):
        log = open(self.workdir / log_name, "wb")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                env=_env(self.home), start_new_session=True,
                                preexec_fn=_die_with_parent)
        self.procs.append(proc)
        return proc

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)  # nothing left running
            raise
        return self

    def _start(self):
        self.workdir.mkdir(parents=True, exist_ok=True)
        if isinstance(self.tls, str):
            if self.tls != "auto":
                raise ValueError(f"tls must be 'auto', a dict of PEM paths or None, got "
                                 f"{self.tls!r}.")
            self.tls = make_certificates(self.workdir / "tls")
        self.home.mkdir(parents=True, exist_ok=True)
        self.cli_home.mkdir(parents=True, exist_ok=True)
        security = (["--ssl-certfile", str(self.tls["cert"]), "--ssl-keyfile",
                     str(self.tls["key"]), "--ssl-ca-certfile", str(self.tls["ca"])]
                    if self.tls else ["--insecure"])
        if self.auth:
            security.append("--enable-supernode-auth")
        self._spawn([str(BIN / "flower-superlink"), *security, "--host", "127.0.0.1",
                     "--port", str(self.port), "--disable-runtime-dependency-installation"],
                    "superlink.log")
        conn = {"address": f'"127.0.0.1:{self.port}"'}
        if self.tls:
            conn["root-certificates"] = f'"{self.tls["ca"]}"'
        else:
            conn["insecure"] = "true"
        body = "\n".join(f"{k} = {v}" for k, v in conn.items())
        (self.cli_home / "config.toml").write_text(
            f'[superlink]\ndefault = "test"\n\n[superlink.test]\n{body}\n')
        self._wait_port(self.port)
        node_security = (["--root-certificates", str(self.tls["ca"])] if self.tls
                         else ["--insecure"])
        for i, config in enumerate(self.node_configs):
            auth = ["--auth-supernode-private-key", str(self._register(i))] if self.auth else []
            node_port = _free_port()
            config_str = " ".join(f"{k}={_toml_value(v)}" for k, v in config.items())
            self.nodes.append(self._spawn(
                [str(BIN / "flower-supernode"), *node_security, *auth, "--superlink",
                 f"127.0.0.1:{self.port}", "--port", str(node_port),
                 "--node-config", config_str],
                f"supernode-{i}.log"))

    def _register(self, i):
        """Make SuperNode ``i``'s key pair and register its public key; return the private key."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        keys = self.workdir / "keys"
        keys.mkdir(exist_ok=True)
        key = ec.generate_private_key(ec.SECP384R1())
        private, public = keys / f"supernode-{i}", keys / f"supernode-{i}.pub"
        private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.OpenSSH,
                                              serialization.NoEncryption()))
        private.chmod(0o600)
        public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                         serialization.PublicFormat.OpenSSH))
        done = subprocess.run([str(BIN / "flwr"), "supernode", "register", str(public), "test",
                               "--format", "json"],
                              env=_env(self.cli_home), capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"registering SuperNode {i} failed: {done.stdout}{done.stderr}")
        self.node_ids.append(int(json.loads(done.stdout[done.stdout.index("{"):])["node-id"]))
        return private

    def _wait_port(self, port, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"SuperLink did not open port {port}: "
                           + (self.workdir / "superlink.log").read_text()[-2000:])

    def _run_args(self, app_dir, run_config):
        config = " ".join(f"{k}={_toml_value(v)}" for k, v in run_config.items())
        return [str(BIN / "flwr"), "run", str(app_dir), "test", "--stream",
                "--run-config", config]

    @property
    def address(self):
        """The SuperLink's address, ``127.0.0.1:port``."""
        return f"127.0.0.1:{self.port}"

    def _check_superlink(self):
        with socket.socket() as s:
            s.settimeout(5)
            if s.connect_ex(("127.0.0.1", self.port)) != 0:
                log = self.workdir / "superlink.log"
                tail = log.read_text()[-1000:] if log.exists() else ""
                raise ConnectionError(
                    f"the SuperLink at {self.address} cannot be reached (is it running?); "
                    f"end of its log:\n{tail}"
                )

    def run(self, app_dir, run_config, timeout=600):
        """``flwr run`` the app on this federation; return the completed process.

        Raises ``ConnectionError`` naming the address if the SuperLink cannot
        be reached.
        """
        self._check_superlink()
        return subprocess.run(self._run_args(app_dir, run_config), env=_env(self.cli_home),
                              capture_output=True, text=True, timeout=timeout)

    def start_run(self, app_dir, run_config):
        """``flwr run`` in the background (stdout and stderr merged, text)."""
        self._check_superlink()
        proc = subprocess.Popen(self._run_args(app_dir, run_config), env=_env(self.cli_home),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def kill_node(self, i):
        os.killpg(self.nodes[i].pid, signal.SIGTERM)

    def __exit__(self, *exc):
        for proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return False

    def logs(self):
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}"
                         for p in sorted(self.workdir.glob("*.log")))


def _toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    return f'"{v}"'


def make_certificates(directory):
    """Write a CA and a certificate for 127.0.0.1 signed by it (PEM), for local TLS runs.

    Parameters
    ----------
    directory : path
        Where ``ca.crt``, ``server.pem`` and ``server.key`` are written.

    Returns
    -------
    files : dict
        ``{"ca", "cert", "key"}`` paths, the ``tls`` of :class:`LocalFederation`.
    """
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)

    def build(subject, issuer, public_key, signing_key, ca, san=None):
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
                   .public_key(public_key).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if san is not None:
            builder = builder.add_extension(san, critical=False)
        return builder.sign(signing_key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "skfed test CA")])
    ca_cert = build(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                       x509.DNSName("localhost")])
    cert = build(name, ca_name, key.public_key(), ca_key, ca=False, san=san)
    files = {"ca": directory / "ca.crt", "cert": directory / "server.pem",
             "key": directory / "server.key"}
    files["ca"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files["key"].write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return files
