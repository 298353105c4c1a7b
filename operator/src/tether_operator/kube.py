"""The only module that calls the Kubernetes API directly (kopf does the watching).

The `kubernetes` client is synchronous; every call runs in a worker thread so the event loop
(kopf's and the executor's) never blocks on the network.
"""

from __future__ import annotations

import asyncio
import base64
import os
from typing import Any

import kopf
import kubernetes
from kubernetes.client.rest import ApiException

from tether.api import GROUP, VERSION

_api: kubernetes.client.ApiClient | None = None


def configure() -> kubernetes.client.Configuration:
    """Load credentials once: in-cluster when running in a pod, else $KUBECONFIG."""
    global _api
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        kubernetes.config.load_incluster_config()
    else:
        kubernetes.config.load_kube_config()
    config = kubernetes.client.Configuration.get_default_copy()
    _api = kubernetes.client.ApiClient(config)
    return config


def login() -> kopf.ConnectionInfo:
    """kopf's credentials: the same ones as this module's client (re-read on every re-login)."""
    config = configure()
    header = config.get_api_key_with_prefix("BearerToken") or config.get_api_key_with_prefix(
        "authorization"
    )
    scheme, _, token = (header or "").rpartition(" ")
    return kopf.ConnectionInfo(
        server=config.host,
        ca_path=config.ssl_ca_cert,
        insecure=not config.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=config.cert_file,
        private_key_path=config.key_file,
    )


def _core() -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(_api)


def _custom() -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(_api)


def _absent(exc: ApiException) -> bool:
    return exc.status == 404


async def get_secret(namespace: str, name: str) -> dict[str, str] | None:
    """The Secret's decoded data, or None if it does not exist."""
    try:
        secret = await asyncio.to_thread(_core().read_namespaced_secret, name, namespace)
    except ApiException as exc:
        if _absent(exc):
            return None
        raise
    return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}


async def get_tool(namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return await asyncio.to_thread(
            _custom().get_namespaced_custom_object, GROUP, VERSION, namespace, "agenttools", name
        )
    except ApiException as exc:
        if _absent(exc):
            return None
        raise


async def patch_status(plural: str, namespace: str, name: str, status: dict[str, Any]) -> None:
    """Merge-patch the status subresource (lists such as conditions are replaced whole)."""
    try:
        await asyncio.to_thread(
            _custom().patch_namespaced_custom_object_status,
            GROUP, VERSION, namespace, plural, name, {"status": status},
        )
    except ApiException as exc:
        if not _absent(exc):  # deleted meanwhile: nothing left to report on
            raise
