"""A real Flyte 2 backend on loopback: the open-source manager binary (flyteorg/flyte main,
``manager/cmd``, built by scripts/flyte-backend.sh) with PostgreSQL (Debian's package, an
unprivileged cluster in a temp dir), a moto S3 server as its object store and a bare
kube-apiserver (tests/support/kube.py) for its TaskAction CRs and pods.

No kubelet: runs are accepted, their TaskAction CRs and pods are created, and they stay queued.
The backend's pod webhook (which injects Flyte secrets into task pods) serves on loopback with a
certificate for 127.0.0.1; `Backend.secret_webhook()` registers it with the apiserver for a test.

``backend_bin()`` returns the binary's directory or raises ``BackendUnavailable`` with the reason
(no source snapshot on this machine, no PostgreSQL): the test group reports itself NOT RUN.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.kube import REPO_ROOT, ControlPlane, free_port
from tests.support.s3 import new_bucket, s3_server

NAMESPACE = "flyte"  # where the backend keeps its TaskAction CRs (actions.kubernetes.namespace)
EXIT_NO_SOURCE = 3  # scripts/flyte-backend.sh: no source snapshot


class BackendUnavailable(RuntimeError):
    """The Flyte backend cannot be started on this machine (why, in the message)."""


def backend_bin() -> Path:
    """The directory with the ``flyte`` binary (built on first use; ~20 min cold)."""
    if os.environ.get("TETHER_FLYTE_BIN"):
        return Path(os.environ["TETHER_FLYTE_BIN"])
    proc = subprocess.run([str(REPO_ROOT / "scripts" / "flyte-backend.sh")], capture_output=True, text=True)
    if proc.returncode == EXIT_NO_SOURCE:
        raise BackendUnavailable(proc.stderr.strip())
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/flyte-backend.sh failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def _pg_bin() -> Path:
    for d in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (d / "initdb").exists():
            return d
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    raise BackendUnavailable("no PostgreSQL server binaries (apt-get install postgresql)")


def _as_unprivileged(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run it as the package's `postgres` user then."""
    if os.geteuid() != 0:
        return argv
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", *argv]


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")


@contextmanager
def postgres() -> Iterator[int]:
    """A throwaway PostgreSQL cluster on 127.0.0.1; yields its port (user postgres, trust auth).
    Its directory is its own (the `postgres` user must own it; test temp dirs are root's 0700)."""
    pg = _pg_bin()
    workdir = Path(tempfile.mkdtemp(prefix="tether-pg-"))
    data = workdir / "pgdata"
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres", "postgres")
    _run(_as_unprivileged([str(pg / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]))
    port = free_port()
    log = workdir / "postgres.log"
    opts = f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        _as_unprivileged([str(pg / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", opts, "-w", "start"]), check=True, capture_output=True
    )
    try:
        yield port
    finally:
        subprocess.run(_as_unprivileged([str(pg / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]), capture_output=True)


def _createdb(port: int, name: str) -> None:
    _run(_as_unprivileged([str(_pg_bin() / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", name]))


def _webhook_certs(certs: Path) -> None:
    """A CA and a server certificate for 127.0.0.1 where the backend's webhook reads them (its own
    would name only in-cluster service names, which the apiserver here cannot reach)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "flyte-webhook-test-ca")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2)).add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    server = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    certs.mkdir(parents=True, exist_ok=True)
    (certs / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (certs / "tls.crt").write_bytes(server.public_bytes(serialization.Encoding.PEM))
    (certs / "tls.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def _config(port: int, pg_port: int, s3: str, bucket: str, kubeconfig: Path, workdir: Path, webhook_port: int) -> str:
    free = [free_port() for _ in range(4)]
    url = f"http://127.0.0.1:{port}"
    return f"""
actions:
  kubernetes:
    namespace: {NAMESPACE}
    kubeconfig: {kubeconfig}
  runServiceUrl: {url}
events:
  runServiceUrl: {url}
runs:
  server:
    host: 127.0.0.1
    port: {port}
  actionsServiceUrl: {url}
  storagePrefix: s3://{bucket}
  database:
    postgres:
      host: 127.0.0.1
      port: {pg_port}
      dbname: runs
      username: postgres
      password: ""
      options: sslmode=disable
executor:
  healthProbeBindAddress: 127.0.0.1:{free[0]}
  metricsBindAddress: "0"
  EventsServiceURL: {url}
  cacheServiceURL: {url}
secret:
  webhookURL: http://127.0.0.1:{free[2]}
webhook:
  localCert: false
  certDir: {workdir / "certs"}
  listenPort: {webhook_port}
  cacheInvalidationPort: {free[2]}
  disableCreateMutatingWebhookConfig: true
  secretManagerTypes: [Embedded]
  embeddedSecretManagerConfig:
    type: K8s
    k8sConfig:
      namespace: {NAMESPACE}
logger:
  level: 4
plugins:
  k8s:
    default-env-vars:
      - _U_EP_OVERRIDE: "127.0.0.1:{port}"
      - _U_INSECURE: "true"
      - _U_USE_ACTIONS: "1"
storage:
  type: stow
  container: {bucket}
  stow:
    kind: s3
    config:
      auth_type: accesskey
      access_key_id: test
      secret_key: test
      region: us-east-1
      endpoint: {s3}
      disable_ssl: true
      v2_signing: true
"""


class Backend:
    def __init__(
        self, endpoint: str, kube: ControlPlane, proc: subprocess.Popen[bytes], log: Path, bucket: str, s3: str, webhook: tuple[int, Path]
    ) -> None:
        self.endpoint = endpoint  # host:port of every Connect/gRPC service
        self.kube = kube
        self.proc = proc
        self.log = log
        self.bucket = bucket
        self.s3 = s3
        self.webhook = webhook  # the pod webhook's port and its CA certificate

    @contextmanager
    def secret_webhook(self) -> Iterator[None]:
        """The backend's pod webhook registered with the apiserver (as its own install does in a
        cluster): task pods that ask for Flyte secrets are created with them injected, or refused
        when one is missing. Off outside the block, so other tests' pods are made as they are."""
        port, ca = self.webhook
        name = "flyte-pod-webhook-test"
        config = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "flyte-pod-webhook.flyte.org",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{port}/mutate--v1-pod",
                        "caBundle": base64.b64encode(ca.read_bytes()).decode(),
                    },
                    "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
                    "objectSelector": {"matchLabels": {"inject-flyte-secrets": "true"}},
                    "failurePolicy": "Fail",
                    "sideEffects": "NoneOnDryRun",
                    "admissionReviewVersions": ["v1"],
                }
            ],
        }
        self.kube.kubectl("apply", "-f", "-", input=json.dumps(config))
        try:
            yield
        finally:
            self.kube.kubectl("delete", "mutatingwebhookconfiguration", name, "--ignore-not-found")

    def play_kubelet(self, pod: dict[str, Any], env: dict[str, str] | None = None, kill_on: str | None = None) -> int:
        """Run the pod's container as a kubelet would, here: the Flyte runtime (`a0`, from this
        environment's `flyte` install) with the pod's args and env, the S3 store's credentials
        (in a cluster: the backend's default env and the namespace's store Secret) - then report its exit through pods/status.
        The backend reads the outputs or error the runtime wrote, as it would in a cluster.

        `env` adds to the container's; `kill_on`: SIGKILL the container as soon as it prints that
        (as the OOM killer or a lost node would), reported as the kubelet does: exit code 137.
        Returns the container's exit code."""
        container = pod["spec"]["containers"][0]
        full_env = {"PATH": os.environ.get("PATH", ""), "HOME": tempfile.gettempdir()}
        full_env.update({e["name"]: e.get("value") or "" for e in container.get("env", [])})
        full_env.update(FLYTE_AWS_ENDPOINT=self.s3, FLYTE_AWS_ACCESS_KEY_ID="test", FLYTE_AWS_SECRET_ACCESS_KEY="test")
        full_env.update(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test")  # the run's store (the chart's store Secret)
        full_env.update(env or {})
        args = container["args"]
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / args[0]), *args[1:]],
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        timer = threading.Timer(300, proc.kill)
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if kill_on is not None and kill_on in line:
                    proc.kill()
        finally:
            timer.cancel()
        returncode = proc.wait()
        code = 128 - returncode if returncode < 0 else returncode  # a container killed by signal N exits 128 + N
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
        status = {
            "phase": "Succeeded" if code == 0 else "Failed",
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": terminated},
                }
            ],
        }
        meta = pod["metadata"]
        self.kube.kubectl(
            "patch",
            "pod",
            meta["name"],
            "-n",
            meta["namespace"],
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": status}),
        )
        return code

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def flyte_backend(kube: ControlPlane, workdir: Path, ready_timeout: float = 180.0) -> Iterator[Backend]:
    """Start the backend against `kube`; yields a Backend whose endpoint the SDK can use."""
    binary = backend_bin() / "flyte"
    src = binary.parent.parent / "src" / "flyte"
    crd = src / "executor" / "config" / "crd" / "bases" / "flyte.org_taskactions.yaml"
    if not crd.exists():
        raise BackendUnavailable(f"the TaskAction CRD is missing from the build tree ({crd})")
    kube.kubectl("apply", "--server-side", "-f", str(crd))
    kube.kubectl("create", "namespace", NAMESPACE, check=False)
    workdir.mkdir(parents=True, exist_ok=True)
    with s3_server() as s3, postgres() as pg_port:
        _createdb(pg_port, "runs")
        bucket = new_bucket(s3)
        port = free_port()
        cfg = workdir / "flyte.yaml"
        webhook_port = free_port()
        _webhook_certs(workdir / "certs")
        cfg.write_text(_config(port, pg_port, s3, bucket, kube.kubeconfig, workdir, webhook_port))
        log = workdir / "flyte.log"
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "KUBECONFIG": str(kube.kubeconfig)}
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(binary), "--config", str(cfg)], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        backend = Backend(f"127.0.0.1:{port}", kube, proc, log, bucket, s3, (webhook_port, workdir / "certs" / "ca.crt"))
        try:
            deadline = time.monotonic() + ready_timeout
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"the Flyte backend exited ({proc.returncode}):\n{backend.tail()}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the Flyte backend was not ready within {ready_timeout:.0f}s:\n{backend.tail()}")
                time.sleep(0.2)
            yield backend
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
