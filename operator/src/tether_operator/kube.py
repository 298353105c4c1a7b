"""The only module that calls the Kubernetes API directly (kopf does the watching).

Credentials come from the `kubernetes` package's loaders (in-cluster ServiceAccount, else
$KUBECONFIG); requests go through one small aiohttp session, like kopf's own. Not the
`kubernetes` client's typed APIs: importing `CoreV1Api` alone costs ~80 MiB of memory (measured),
more than the whole operator otherwise needs.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from typing import Any

import aiohttp
import kopf
import kubernetes

from tether.api import GROUP, VERSION


class KubeError(RuntimeError):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:500]}")
        self.status = status


def configure() -> kubernetes.client.Configuration:
    """Load credentials: in-cluster when running in a pod, else $KUBECONFIG."""
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        kubernetes.config.load_incluster_config()
    else:
        kubernetes.config.load_kube_config()
    return kubernetes.client.Configuration.get_default_copy()


def connection_info() -> kopf.ConnectionInfo:
    """The current credentials (re-read each time: in-cluster tokens rotate)."""
    config = configure()
    header = config.get_api_key_with_prefix("BearerToken") or config.get_api_key_with_prefix("authorization")
    scheme, _, token = (header or "").rpartition(" ")
    return kopf.ConnectionInfo(
        server=config.host,
        ca_path=config.ssl_ca_cert,
        insecure=not config.verify_ssl,
        scheme=scheme or ("Bearer" if token else None),
        token=token or None,
        certificate_path=config.cert_file,
        private_key_path=config.key_file,
    )


def kopf_session(connections: int) -> kopf.AiohttpSession:
    """kopf's credentials as a session whose pool holds at most `connections` connections.

    kopf's own pool is unbounded: with 300 AgentRuns appearing at once it kept ~190 TLS
    connections open (measured), ~250 KiB each. Must be called inside the event loop.
    """
    info = connection_info()
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
    )
    return kopf.AiohttpSession(server=info.server, aiohttp_session=session)


_session: aiohttp.ClientSession | None = None
_server = ""


async def _open() -> aiohttp.ClientSession:
    global _session, _server
    if _session is None or _session.closed:
        info = connection_info()
        _server = info.server.rstrip("/")
        # 32 connections: with 8, the patches and creates of 20 runs applied per second queued
        # behind each other for seconds on a loaded apiserver (benchmarks/operator_scale.py).
        # A request waits for a connection as long as it takes (an apiserver slower than the runs
        # coming in makes a queue, not errors and retries that load it more); on the wire it has
        # 10 s to connect and 30 s between bytes.
        _session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=32, ssl=info.as_ssl_context()),
            headers=info.as_http_headers(),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=30),
        )
    return _session


async def close() -> None:
    global _session
    if _session is not None:
        await _session.close()
        _session = None


async def request(method: str, path: str, body: Any = None, content_type: str = "application/json", accept: str = "") -> Any:
    """JSON in, JSON out; None on 404. A 401 re-reads the credentials once (token rotation)."""
    for attempt in (1, 2):
        session = await _open()
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if body is not None else {}
        if accept:
            headers["Accept"] = accept
        async with session.request(method, _server + path, data=data, headers=headers) as rsp:
            if rsp.status == 401 and attempt == 1:
                await close()
                continue
            if rsp.status == 404:
                return None
            text = await rsp.text()
            if rsp.status >= 400:
                raise KubeError(rsp.status, method, path, text)
            return json.loads(text) if text else None
    raise AssertionError("unreachable")


async def get_secret(namespace: str, name: str) -> dict[str, str] | None:
    """The Secret's decoded data, or None if it does not exist."""
    secret = await request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
    if secret is None:
        return None
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


async def read_secret(namespace: str, name: str) -> tuple[dict[str, str], dict[str, str]] | None:
    """The Secret's labels and decoded data, or None if it does not exist."""
    secret = await request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
    if secret is None:
        return None
    labels = (secret.get("metadata") or {}).get("labels") or {}
    return labels, {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


async def secret_labels(namespace: str, name: str) -> dict[str, str] | None:
    """The Secret's labels, or None if it does not exist. Asks for its metadata only
    (PartialObjectMetadata): the apiserver sends no data, so no value ever reaches the operator."""
    meta = await request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}", accept=METADATA_ONLY)
    if meta is None:
        return None
    labels: dict[str, str] = (meta.get("metadata") or {}).get("labels") or {}
    return labels


ADMISSION = "/apis/admissionregistration.k8s.io/v1"


async def admission_policy(name: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The ValidatingAdmissionPolicy `name` and the binding of the same name (None: missing,
    including on a cluster without the API)."""
    policy = await request("GET", f"{ADMISSION}/validatingadmissionpolicies/{name}")
    binding = await request("GET", f"{ADMISSION}/validatingadmissionpolicybindings/{name}")
    return policy, binding


async def get_tool(namespace: str, name: str) -> dict[str, Any] | None:
    tool: dict[str, Any] | None = await request("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/agenttools/{name}")
    return tool


async def patch_status(plural: str, namespace: str, name: str, status: dict[str, Any]) -> None:
    """Merge-patch the status subresource (lists such as conditions are replaced whole).
    An object deleted meanwhile is fine: there is nothing left to report on."""
    await request(
        "PATCH",
        f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}/{name}/status",
        {"status": status},
        "application/merge-patch+json",
    )


def core_path(namespace: str, plural: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/{plural}" + (f"/{name}" if name else "")


async def create(path: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """POST an object: (the object, True) when this call created it; (the object that exists
    under that name, False) on 409. A name that exists may be someone else's: the caller checks
    that it is what it would have created before using it."""
    name = body["metadata"]["name"]
    for _ in range(3):
        try:
            return await request("POST", path, body), True
        except KubeError as exc:
            if exc.status != 409:
                raise
        existing = await request("GET", f"{path}/{name}")
        if existing is not None:
            return existing, False
    raise KubeError(409, "POST", path, f"{name} exists and vanishes each time it is read")


async def delete(path: str, uid: str | None = None) -> bool:
    """DELETE an object, gone already or not; background propagation (its dependents follow).
    With `uid`, only that object: one made again under the name (409) is left alone. True if
    this call deleted it."""
    body: dict[str, Any] = {"propagationPolicy": "Background"}
    if uid is not None:
        body["preconditions"] = {"uid": uid}
    try:
        return await request("DELETE", path, body) is not None
    except KubeError as exc:
        if uid is not None and exc.status == 409:
            return False
        raise


async def set_finalizer(
    plural: str, namespace: str, name: str, finalizer: str, present: bool, seen: Mapping[str, Any] | None = None
) -> bool:
    """Add or remove one finalizer of a tether.dev object (optimistic concurrency on the
    resourceVersion, so other finalizers are never lost). False if the object is gone. `seen`:
    the object's metadata as last seen (a watch event's), tried first without a GET; a newer
    object makes the PATCH fail (409) and the object is read."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}/{name}"
    for _ in range(10):
        if seen is not None and seen.get("resourceVersion"):
            obj: dict[str, Any] | None = {"metadata": seen}
            seen = None
        else:
            obj = await request("GET", path)
        if obj is None:
            return False
        meta = obj["metadata"]
        current = list(meta.get("finalizers") or [])
        wanted = [f for f in current if f != finalizer] + ([finalizer] if present else [])
        if wanted == current or (present and finalizer in current):
            return True
        patch = {"metadata": {"finalizers": wanted, "resourceVersion": meta["resourceVersion"]}}
        try:
            await request("PATCH", path, patch, "application/merge-patch+json")
            return True
        except KubeError as exc:
            if exc.status != 409:
                raise
    raise KubeError(409, "PATCH", path, "finalizers kept changing")


async def token_review(token: str) -> dict[str, Any]:
    """Who the apiserver says a bearer token is: the TokenReview's status (``authenticated``, ``user``)."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
    review = await request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body)
    status: dict[str, Any] = (review or {}).get("status") or {}
    return status


async def access_review(spec: dict[str, Any]) -> bool:
    """Whether the user a SubjectAccessReview ``spec`` names may do what it says."""
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    review = await request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
    return bool(((review or {}).get("status") or {}).get("allowed"))


async def list_runs(namespace: str) -> list[dict[str, Any]]:
    """The AgentRuns of a namespace (every namespace: ``""``)."""
    where = f"/namespaces/{namespace}" if namespace else ""
    runs: list[dict[str, Any]] = ((await request("GET", f"/apis/{GROUP}/{VERSION}{where}/agentruns")) or {}).get("items") or []
    return runs


async def get_run(namespace: str, name: str) -> dict[str, Any] | None:
    run: dict[str, Any] | None = await request("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/agentruns/{name}")
    return run
