"""The bare control plane from tests/support/kube.py works like a real cluster.

Needs the binaries from scripts/k8s-tools.sh (built on first use; set
TETHER_K8S_BIN to reuse a prebuilt bin dir).
"""

from __future__ import annotations

import json
import time

import pytest

from tests.support.kube import ControlPlane, kube  # noqa: F401

pytestmark = pytest.mark.kube

NS = "tether-kcp-test"
CRD_NAME = "widgets.tether-test.example.com"

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": CRD_NAME},
    "spec": {
        "group": "tether-test.example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1, "maximum": 10},
                                    "color": {"type": "string", "enum": ["red", "blue"]},
                                },
                                "x-kubernetes-validations": [
                                    {"rule": "self == oldSelf", "message": "spec is immutable"},
                                ],
                            },
                            "status": {
                                "type": "object",
                                "properties": {"phase": {"type": "string"}},
                            },
                        },
                    }
                },
            }
        ],
    },
}


def widget(name: str, **spec: object) -> str:
    return json.dumps(
        {
            "apiVersion": "tether-test.example.com/v1",
            "kind": "Widget",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        }
    )


def apply_retrying(kube: ControlPlane, manifest: str, timeout: float = 30.0):
    """kubectl apply, retrying while the new CRD's REST mapping is not yet discovered."""
    deadline = time.monotonic() + timeout
    while True:
        proc = kube.kubectl("apply", "-f", "-", input=manifest, check=False)
        if proc.returncode == 0 or "no matches for kind" not in proc.stderr or time.monotonic() > deadline:
            return proc
        time.sleep(0.5)


def ensure_namespace(kube: ControlPlane, name: str) -> None:
    kube.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))


def test_configmap_roundtrip(kube: ControlPlane) -> None:
    ensure_namespace(kube, NS)
    kube.kubectl("create", "configmap", "greeting", "-n", NS, "--from-literal=hello=world")
    got = kube.kubectl("get", "configmap", "greeting", "-n", NS, "-o", "jsonpath={.data.hello}")
    assert got.stdout == "world"
    assert kube.server.startswith("https://127.0.0.1:")
    assert kube.kubeconfig.is_file()


def test_crd_schema_cel_and_status(kube: ControlPlane) -> None:
    ensure_namespace(kube, NS)
    kube.kubectl("apply", "-f", "-", input=json.dumps(CRD))
    kube.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")

    # (a) schema violation is rejected with the validation message
    bad = apply_retrying(kube, widget("too-big", size=42))
    assert bad.returncode != 0, bad.stdout
    assert "spec.size" in bad.stderr and "less than or equal to 10" in bad.stderr, bad.stderr
    bad = kube.kubectl("apply", "-f", "-", input=widget("pink", size=1, color="pink"), check=False)
    assert bad.returncode != 0 and "Unsupported value" in bad.stderr, bad.stderr

    # a valid object is accepted
    ok = apply_retrying(kube, widget("w1", size=3, color="red"))
    assert ok.returncode == 0, ok.stderr

    # (b) the CEL transition rule `self == oldSelf` makes spec immutable
    upd = kube.kubectl("patch", "widget", "w1", "-n", NS, "--type=merge", "-p", '{"spec":{"size":4}}', check=False)
    assert upd.returncode != 0, upd.stdout
    assert "spec is immutable" in upd.stderr, upd.stderr

    # status subresource: status writes go through, spec stays put
    kube.kubectl("patch", "widget", "w1", "-n", NS, "--subresource=status", "--type=merge", "-p", '{"status":{"phase":"Ready"}}')
    obj = json.loads(kube.kubectl("get", "widget", "w1", "-n", NS, "-o", "json").stdout)
    assert obj["status"] == {"phase": "Ready"}
    assert obj["spec"] == {"size": 3, "color": "red"}


def test_rbac_and_impersonation(kube: ControlPlane) -> None:
    # (c) a ServiceAccount with no bindings may not read secrets
    sa = "system:serviceaccount:default:nobody"
    no = kube.kubectl("auth", "can-i", "get", "secrets", f"--as={sa}", check=False)
    assert no.stdout.strip() == "no", (no.stdout, no.stderr)
    assert no.returncode == 1

    # the admin (system:masters) can do anything, including impersonation
    assert kube.kubectl("auth", "can-i", "*", "*").stdout.strip() == "yes"
    assert kube.kubectl("auth", "can-i", "impersonate", "serviceaccounts").stdout.strip() == "yes"

    # grant the SA read on configmaps in NS; impersonated checks see it
    ensure_namespace(kube, "rbac-test")
    kube.kubectl("create", "role", "cm-reader", "-n", "rbac-test", "--verb=get,list", "--resource=configmaps")
    kube.kubectl("create", "rolebinding", "cm-reader", "-n", "rbac-test", "--role=cm-reader", "--serviceaccount=default:nobody")
    yes = kube.kubectl("auth", "can-i", "list", "configmaps", "-n", "rbac-test", f"--as={sa}")
    assert yes.stdout.strip() == "yes"
    kube.kubectl("get", "configmaps", "-n", "rbac-test", f"--as={sa}")
    denied = kube.kubectl("get", "secrets", "-n", "rbac-test", f"--as={sa}", check=False)
    assert denied.returncode != 0 and "Forbidden" in denied.stderr, denied.stderr

    # extra static-token users authenticate but start with no rights
    user_kc = kube.kubeconfig_for("tether-test-user")
    who = kube.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}", kubeconfig=user_kc)
    assert who.stdout == "tether-test-user"
    forbidden = kube.kubectl("get", "configmaps", "-n", "rbac-test", kubeconfig=user_kc, check=False)
    assert forbidden.returncode != 0 and "forbidden" in forbidden.stderr.lower()

    # helm talks to the same cluster
    assert kube.helm("list", "-A").returncode == 0
