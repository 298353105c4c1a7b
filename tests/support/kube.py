"""A bare Kubernetes control plane (etcd + kube-apiserver) on loopback, for tests.

envtest-style: no controller-manager, scheduler or kubelet, so nothing runs
pods, there is no garbage collection and namespaces never finish deleting.
What you do get is the real API server: OpenAPI/CEL validation, CRDs, status
subresources, RBAC, impersonation, watches, server-side apply.

Usage::

    from tests.support.kube import start_control_plane

    with start_control_plane(tmp_path) as cp:
        cp.kubectl("create", "namespace", "demo")
        cp.kubectl("auth", "can-i", "get", "pods", "--as=tether-test-user", check=False)

or, in pytest, the session-scoped ``kube`` fixture (re-export it in the test
module with ``from tests.support.kube import kube  # noqa``).

Binaries come from ``$TETHER_K8S_BIN`` if set, else from running
``scripts/k8s-tools.sh`` (cached; a cold build takes ~20-25 minutes).
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S_TOOLS = REPO_ROOT / "scripts" / "k8s-tools.sh"

ADMIN_USER = "tether-admin"
#: Users registered in the static token file besides the admin. They are only
#: in ``system:authenticated``; grant them rights with RBAC in your test.
DEFAULT_EXTRA_USERS = ("tether-test-user", "tether-test-user-2", "tether-test-user-3")

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"


class ControlPlaneError(RuntimeError):
    """The control plane failed to build, start or become ready."""


class CommandError(subprocess.CalledProcessError):
    """A kubectl/helm call failed; str() includes its stdout and stderr."""

    def __str__(self) -> str:  # pragma: no cover - formatting only
        return f"{super().__str__()}\n--- stdout ---\n{self.stdout or ''}\n--- stderr ---\n{self.stderr or ''}"


def ensure_k8s_tools() -> Path:
    """Return the directory holding kube-apiserver, etcd, kubectl and helm.

    Uses ``$TETHER_K8S_BIN`` when set, else runs ``scripts/k8s-tools.sh``
    (idempotent; prints the bin dir on its last stdout line).
    """
    env_bin = os.environ.get("TETHER_K8S_BIN")
    if env_bin:
        return Path(env_bin)
    proc = subprocess.run(
        ["bash", str(K8S_TOOLS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if proc.returncode != 0:
        raise ControlPlaneError(f"{K8S_TOOLS} failed (exit {proc.returncode}):\n{_tail_text(proc.stderr, 60)}")
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise ControlPlaneError(f"{K8S_TOOLS} printed no bin dir")
    return Path(lines[-1])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _free_ports(n: int) -> list[int]:
    # Hold all sockets open until every port is chosen so they are distinct.
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _tail_text(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _tail_file(path: Path, lines: int = 40) -> str:
    try:
        data = path.read_bytes()[-64 * 1024 :].decode("utf-8", "replace")
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    return _tail_text(data, lines)


def _make_rsa_key(path: Path) -> None:
    """RSA private key (PKCS#8 PEM) for service-account token signing."""
    openssl = shutil.which("openssl")
    if openssl:
        subprocess.run(
            [openssl, "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(path)],
            check=True,
            capture_output=True,
        )
        return
    try:  # fallback only when there is no openssl CLI
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
    except ImportError as e:  # pragma: no cover
        raise ControlPlaneError("need the openssl CLI or the cryptography package") from e
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _kill_group(proc: subprocess.Popen | None, timeout: float = 15.0) -> None:
    if proc is None or proc.poll() is not None:
        if proc is not None:
            _signal_group(proc.pid, signal.SIGKILL)  # stray children, if any
        return
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)
    _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # started with start_new_session=True: pgid == pid
    except (ProcessLookupError, PermissionError):
        pass


class ControlPlane:
    """etcd + kube-apiserver on 127.0.0.1. Use as a context manager or call stop()."""

    def __init__(
        self,
        workdir: Path,
        bin_dir: Path | None = None,
        extra_users: Sequence[str] = DEFAULT_EXTRA_USERS,
        apiserver_args: Sequence[str] = (),
        ready_timeout: float = 180.0,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.bin_dir = Path(bin_dir) if bin_dir is not None else ensure_k8s_tools()
        self.extra_users = tuple(extra_users)
        self.apiserver_args = tuple(apiserver_args)
        self.ready_timeout = ready_timeout

        self.etcd_proc: subprocess.Popen | None = None
        self.apiserver_proc: subprocess.Popen | None = None
        self.etcd_log = self.workdir / "etcd.log"
        self.apiserver_log = self.workdir / "kube-apiserver.log"
        self.cert_dir = self.workdir / "certs"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.ca_file = self.cert_dir / "apiserver.crt"
        self.etcd_url = ""
        self.server = ""
        self.token = secrets.token_hex(16)
        #: user name -> bearer token, for every user in the static token file.
        self.tokens: dict[str, str] = {ADMIN_USER: self.token}
        for user in self.extra_users:
            self.tokens[user] = secrets.token_hex(16)

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> ControlPlane:
        for name in ("kube-apiserver", "etcd", "kubectl"):
            if not os.access(self.bin_dir / name, os.X_OK):
                raise ControlPlaneError(f"{self.bin_dir / name} is missing or not executable")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            self._with_port_retry(self._start_etcd, "etcd")
            self._with_port_retry(self._start_apiserver, "apiserver")
            self._write_kubeconfig(self.kubeconfig, ADMIN_USER)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Terminate kube-apiserver then etcd (whole process groups). Idempotent."""
        _kill_group(self.apiserver_proc)
        _kill_group(self.etcd_proc)
        for f in ("_apiserver_log_fh", "_etcd_log_fh"):
            fh = getattr(self, f, None)
            if fh is not None and not fh.closed:
                fh.close()

    def __enter__(self) -> ControlPlane:
        if self.apiserver_proc is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- clients -----------------------------------------------------------

    def env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        """Environment for kubectl/helm/other clients talking to this cluster."""
        env = dict(os.environ)
        env.update(
            KUBECONFIG=str(kubeconfig or self.kubeconfig),
            KUBECACHEDIR=str(self.workdir / "kube-cache"),
            HELM_CACHE_HOME=str(self.workdir / "helm" / "cache"),
            HELM_CONFIG_HOME=str(self.workdir / "helm" / "config"),
            HELM_DATA_HOME=str(self.workdir / "helm" / "data"),
        )
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def _run(
        self, argv: list[str], check: bool, input: str | None, kubeconfig: Path | None, timeout: float | None
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            env=self.env(kubeconfig),
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise CommandError(proc.returncode, argv, proc.stdout, proc.stderr)
        return proc

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, kubeconfig: Path | None = None, timeout: float | None = 120
    ) -> subprocess.CompletedProcess:
        """Run kubectl against this cluster (as the admin unless kubeconfig= is given)."""
        kc = kubeconfig or self.kubeconfig
        argv = [str(self.bin_dir / "kubectl"), f"--kubeconfig={kc}", *args]
        return self._run(argv, check, input, kc, timeout)

    def helm(
        self, *args: str, check: bool = True, input: str | None = None, kubeconfig: Path | None = None, timeout: float | None = 300
    ) -> subprocess.CompletedProcess:
        kc = kubeconfig or self.kubeconfig
        argv = [str(self.bin_dir / "helm"), f"--kubeconfig={kc}", *args]
        return self._run(argv, check, input, kc, timeout)

    def kubeconfig_for(self, user: str) -> Path:
        """A kubeconfig authenticating as one of the static-token users."""
        if user not in self.tokens:
            raise KeyError(f"{user!r} is not a token user; known: {sorted(self.tokens)}")
        path = self.workdir / f"kubeconfig-{user}"
        self._write_kubeconfig(path, user)
        return path

    def request(self, method: str, path: str, body: object | None = None, token: str | None = None) -> tuple[int, object]:
        """Raw HTTPS request; returns (status, parsed JSON or text)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self._ssl_context(), timeout=10) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        text = raw.decode("utf-8", "replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    # -- internals ---------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        if self.ca_file.exists():
            ctx = ssl.create_default_context(cafile=str(self.ca_file))
        else:  # only while the apiserver has not written its cert yet
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _spawn(self, argv: list[str], log: Path) -> tuple[subprocess.Popen, object]:
        fh = open(log, "ab")
        proc = subprocess.Popen(
            argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.workdir,
            start_new_session=True,
        )
        return proc, fh

    def _fail(self, msg: str) -> ControlPlaneError:
        parts = [msg]
        for name, log in (("kube-apiserver", self.apiserver_log), ("etcd", self.etcd_log)):
            if log.exists():
                parts.append(f"--- tail of {name} log ({log}) ---\n{_tail_file(log)}")
        return ControlPlaneError("\n".join(parts))

    def _with_port_retry(self, start: Callable[[], None], which: str, attempts: int = 3) -> None:
        """Free ports are picked before the server binds them: retry on a lost race."""
        for attempt in range(attempts):
            try:
                return start()
            except ControlPlaneError as e:
                if "address already in use" not in str(e) or attempt == attempts - 1:
                    raise
                _kill_group(getattr(self, f"{which}_proc"))
                getattr(self, f"_{which}_log_fh").close()

    def _start_etcd(self) -> None:
        client_port, peer_port = _free_ports(2)
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        data_dir = self.workdir / "etcd-data"
        argv = [
            str(self.bin_dir / "etcd"),
            "--name=tether-test",
            f"--data-dir={data_dir}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=tether-test={peer_url}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]
        self.etcd_proc, self._etcd_log_fh = self._spawn(argv, self.etcd_log)
        deadline = time.monotonic() + 60
        last = ""
        while time.monotonic() < deadline:
            if self.etcd_proc.poll() is not None:
                raise self._fail(f"etcd exited with code {self.etcd_proc.returncode}")
            try:
                with urllib.request.urlopen(self.etcd_url + "/health", timeout=2) as r:
                    body = json.loads(r.read())
                    if str(body.get("health")) == "true":
                        return
                    last = str(body)
            except (OSError, ValueError) as e:
                last = str(e)
            time.sleep(0.2)
        raise self._fail(f"etcd not healthy at {self.etcd_url} within 60s: {last}")

    def _start_apiserver(self) -> None:
        sa_key = self.workdir / "sa.key"
        if not sa_key.exists():
            _make_rsa_key(sa_key)
        token_file = self.workdir / "tokens.csv"
        rows = [f'{self.token},{ADMIN_USER},{ADMIN_USER},"system:masters"']
        rows += [f"{tok},{user},{user}" for user, tok in self.tokens.items() if user != ADMIN_USER]
        token_file.write_text("\n".join(rows) + "\n")
        token_file.chmod(0o600)

        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        argv = [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--cert-dir={self.cert_dir}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # 1.37 refuses a loopback advertise address for the endpoint reconciler;
            # nothing here needs the default/kubernetes Endpoints anyway.
            "--endpoint-reconciler-type=none",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--disable-admission-plugins=ServiceAccount",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            f"--token-auth-file={token_file}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={sa_key}",
            f"--service-account-signing-key-file={sa_key}",
            "--profiling=false",
            *self.apiserver_args,
        ]
        self.apiserver_proc, self._apiserver_log_fh = self._spawn(argv, self.apiserver_log)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        last = "no response yet"
        checks = [
            ("readyz", "/readyz", lambda s, b: s == 200 and str(b).strip() == "ok"),
            ("discovery", "/api/v1", lambda s, b: s == 200 and any(r.get("name") == "namespaces" for r in b.get("resources", []))),
            ("default namespace", "/api/v1/namespaces/default", lambda s, b: s == 200),
        ]
        for name, path, ok in checks:
            while True:
                assert self.apiserver_proc is not None
                if self.apiserver_proc.poll() is not None:
                    raise self._fail(f"kube-apiserver exited with code {self.apiserver_proc.returncode}")
                try:
                    status, body = self.request("GET", path)
                    if ok(status, body):
                        break
                    last = f"{name}: HTTP {status}: {str(body)[:500]}"
                except (OSError, ValueError, AttributeError, ssl.SSLError) as e:
                    last = f"{name}: {e}"
                if time.monotonic() > deadline:
                    raise self._fail(f"kube-apiserver at {self.server} not ready within {self.ready_timeout:.0f}s; last: {last}")
                time.sleep(0.25)

    def _write_kubeconfig(self, path: Path, user: str) -> None:
        cluster: dict[str, object] = {"server": self.server}
        if self.ca_file.exists():
            cluster["certificate-authority-data"] = base64.b64encode(self.ca_file.read_bytes()).decode()
        else:  # pragma: no cover - the apiserver always writes it before ready
            cluster["insecure-skip-tls-verify"] = True
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "tether-test", "cluster": cluster}],
            "users": [{"name": user, "user": {"token": self.tokens[user]}}],
            "contexts": [{"name": "tether-test", "context": {"cluster": "tether-test", "user": user}}],
            "current-context": "tether-test",
        }
        path.write_text(json.dumps(cfg, indent=2))  # JSON is valid kubeconfig YAML
        path.chmod(0o600)


def start_control_plane(workdir: Path, bin_dir: Path | None = None, **kwargs) -> ControlPlane:
    """Start etcd + kube-apiserver under ``workdir``; returns a started ControlPlane.

    It is also a context manager (``with start_control_plane(p) as cp: ...``),
    and stop() is registered with atexit as a safety net.
    """
    return ControlPlane(Path(workdir), bin_dir, **kwargs).start()


def kube_fixture() -> Iterator[ControlPlane]:
    """Generator behind the session-scoped pytest fixture ``kube``.

    Workdir: ``$TETHER_KUBE_WORKDIR`` or a fresh temp dir, removed afterwards
    unless ``TETHER_KUBE_KEEP=1`` (logs: kube-apiserver.log, etcd.log).
    """
    fixed = os.environ.get("TETHER_KUBE_WORKDIR")
    workdir = Path(fixed) if fixed else Path(tempfile.mkdtemp(prefix="tether-kube-"))
    cp = start_control_plane(workdir)
    try:
        yield cp
    finally:
        cp.stop()
        if not fixed and os.environ.get("TETHER_KUBE_KEEP") != "1":
            shutil.rmtree(workdir, ignore_errors=True)


try:  # pytest is optional for users of start_control_plane()
    import pytest as _pytest_mod
except ImportError:  # pragma: no cover
    kube = None
else:
    kube = _pytest_mod.fixture(scope="session", name="kube")(kube_fixture)
