"""The Helm chart: lint, render, security context, RBAC — rendered, then applied and checked on
the real apiserver by impersonating the operator's ServiceAccount."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube import ControlPlane, ensure_k8s_tools

from .conftest import CHART, Release

pytestmark = pytest.mark.kube


@pytest.fixture(scope="module")
def helm() -> Path:
    return ensure_k8s_tools() / "helm"


def render(helm: Path, *sets: str, check: bool = True, scope: str = "watchNamespaces={team-a}") -> list[dict[str, Any]] | str:
    """`helm template` with `sets`; `scope` is the namespaces value every install must give. The
    objects `helm install` makes: the test hooks are `helm test`'s (test_chart_package.py)."""
    argv = [str(helm), "template", "tether", str(CHART), "-n", "tether-system", "--skip-tests"]
    for s in ("store.s3.bucket=test-runs", *([scope] if scope else []), *sets):  # the kubernetes executor needs a store pods reach
        argv += ["--set", s]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if not check:
        return proc.stderr
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_helm_lint(helm: Path) -> None:
    argv = [str(helm), "lint", "--strict", str(CHART), "--set", "store.s3.bucket=runs", "--set", "watchNamespaces={team-a}"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_kubernetes_executor_refuses_a_store_its_pods_cannot_reach(helm: Path) -> None:
    argv = [str(helm), "template", "tether", str(CHART), "--set", "watchNamespaces={team-a}"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode != 0 and "runner pods need a store they can reach; set store.s3.bucket" in proc.stderr
    proc = subprocess.run([*argv, "--set", "executor.kind=local"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_deployment_is_hardened(helm: Path) -> None:
    (deploy,) = of_kind(render(helm), "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    assert deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"]["type"] == "Recreate"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["privileged"] is False
    assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]
    # a read-only root still needs somewhere to write: emptyDirs for /tmp and the work dir
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/tmp", "/var/lib/tether"}
    annotations = deploy["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"


def test_store_executor_and_gpu_pools_reach_the_operator(helm: Path) -> None:
    docs = render(
        helm,
        "store.s3.bucket=runs",
        "store.s3.endpoint=http://minio:9000",
        "store.s3.region=eu-west-1",
        "store.s3.credentialsSecret.name=s3-creds",
        "executor.concurrency=8",
        "gpuNodePools.A100.nodeSelector.pool=a100",
        "gpuNodePools.A100.tolerations[0].key=nvidia.com/gpu",
        "gpuNodePools.A100.tolerations[0].operator=Exists",
    )
    (deploy,) = of_kind(docs, "Deployment")
    env = {e["name"]: e for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TETHER_STORE_URL"]["value"] == "s3://runs/tether?endpoint_url=http://minio:9000&region=eu-west-1"
    assert env["TETHER_CONCURRENCY"]["value"] == "8"
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "s3-creds", "key": "AWS_ACCESS_KEY_ID"}
    pools = json.loads(env["TETHER_GPU_NODE_POOLS"]["value"])
    assert pools["A100"]["nodeSelector"] == {"pool": "a100"}
    assert pools["A100"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert json.loads(env["TETHER_ALLOWED_BASE_URLS"]["value"]) == []  # default: no allowlist, unsafe addresses refused


def test_allowed_base_urls_reach_the_operator(helm: Path) -> None:
    docs = render(helm, "providers.allowedBaseURLs={https://llm.internal/v1,http://127.0.0.1}")
    (deploy,) = of_kind(docs, "Deployment")
    env = {e["name"]: e for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    # and helm test's fake provider (tests.enabled; test_chart_package.py)
    assert json.loads(env["TETHER_ALLOWED_BASE_URLS"]["value"]) == [
        "https://llm.internal/v1",
        "http://127.0.0.1",
        "http://tether-test-provider.team-a.svc:8080",
    ]


def test_crds_switch_and_keep_policy(helm: Path) -> None:
    crds = of_kind(render(helm), "CustomResourceDefinition")
    assert sorted(c["metadata"]["name"] for c in crds) == ["agentapprovals.tether.dev", "agentruns.tether.dev", "agenttools.tether.dev"]
    assert all(c["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep" for c in crds)
    # the chart's copy is the generated one, unchanged apart from metadata
    generated = yaml.safe_load((CHART.parents[1] / "crds" / "tether.dev_agentruns.yaml").read_text())
    (rendered,) = [c for c in crds if c["metadata"]["name"] == "agentruns.tether.dev"]
    assert rendered["spec"] == generated["spec"]
    unkept = of_kind(render(helm, "crds.keep=false"), "CustomResourceDefinition")
    assert all("helm.sh/resource-policy" not in (c["metadata"].get("annotations") or {}) for c in unkept)
    assert of_kind(render(helm, "crds.enabled=false"), "CustomResourceDefinition") == []


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("replicaCount=3", "additional properties 'replicaCount' not allowed"),
        ("executor.kind=celery", "executor"),
        ("executor.concurrency=0", "concurrency"),
        ("watchNamespaces[0]=Not_A_Namespace", "watchNamespaces"),
        ("store.s3.bukket=x", "additional properties 'bukket' not allowed"),
        ("gpuNodePools.A100.nodeSelectr.x=y", "nodeSelectr"),
        ("providers.allowedBaseURLs={ftp://llm}", "allowedBaseURLs"),
        ("providers.allowedBaseURLs={https://user:pw@llm}", "allowedBaseURLs"),
        ("providers.allowedBaseURL={https://llm}", "additional properties 'allowedBaseURL' not allowed"),
        ("metrics.serviceMonitor.kind=Probe", "kind"),
        ("metrics.serviceMonitor.interval=often", "interval"),
        ("executor.warmPods.idleSeconds=30", "idleSeconds"),  # a claim keeps 60 s from a warm pod's end
        ("executor.warmPods.count=-1", "count"),
    ],
)
def test_values_schema_rejects_mistakes(helm: Path, setting: str, complaint: str) -> None:
    assert complaint in render(helm, setting, check=False)


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("monitor", ["off", "ServiceMonitor", "PodMonitor"])
def test_metrics_monitor_scrapes_the_operator_pod(helm: Path, monitor: str) -> None:
    sets = [] if monitor == "off" else ["metrics.serviceMonitor.enabled=true", f"metrics.serviceMonitor.kind={monitor}"]
    docs = render(helm, *sets, "metrics.serviceMonitor.labels.release=kps", "metrics.serviceMonitor.interval=15s")
    monitors = of_kind(docs, "ServiceMonitor") + of_kind(docs, "PodMonitor")
    services = of_kind(docs, "Service")
    if monitor == "off":  # the default: nothing that needs the Prometheus Operator's CRDs
        assert monitors == [] and services == []
        return
    (deploy,) = of_kind(docs, "Deployment")
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    assert {"name": "metrics", "containerPort": 9090} in [{k: p[k] for k in ("name", "containerPort")} for p in container["ports"]]
    (mon,) = monitors
    assert mon["kind"] == monitor and mon["metadata"]["namespace"] == "tether-system" and mon["metadata"]["labels"]["release"] == "kps"
    assert mon["spec"]["namespaceSelector"] == {"matchNames": ["tether-system"]}
    (endpoint,) = mon["spec"]["endpoints" if monitor == "ServiceMonitor" else "podMetricsEndpoints"]
    # honorLabels: the metrics' `namespace` is the run's, not the scraped pod's
    assert endpoint == {"port": "metrics", "path": "/metrics", "interval": "15s", "honorLabels": True}
    if monitor == "PodMonitor":
        assert services == [] and _matches(mon["spec"]["selector"]["matchLabels"], pod_labels)
        return
    (service,) = services  # the ServiceMonitor brings the Service it selects, and it selects only that one
    assert _matches(mon["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert not _matches(mon["spec"]["selector"]["matchLabels"], pod_labels)
    assert _matches(service["spec"]["selector"], pod_labels)
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]


def test_metrics_service_and_dashboard_values(helm: Path) -> None:
    docs = render(helm, "metrics.service.enabled=true", "metrics.dashboard.enabled=true", "metrics.dashboard.namespace=monitoring")
    assert of_kind(docs, "ServiceMonitor") == [] and len(of_kind(docs, "Service")) == 1
    (dashboard,) = [c for c in of_kind(docs, "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]
    assert dashboard["metadata"]["namespace"] == "monitoring" and dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["tether.json"]) == json.loads((CHART / "dashboards" / "tether.json").read_text())
    assert not [c for c in of_kind(render(helm), "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]


def _rules(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    return sorted((g, r, v) for rule in doc["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"])


def test_rendered_rbac_is_least_privilege(helm: Path) -> None:
    docs = render(helm, "watchNamespaces={team-a,team-b}", "executor.kind=local")
    (discovery,) = of_kind(docs, "ClusterRole")  # namespaced mode: the only ClusterRole
    assert {v for _, _, v in _rules(discovery)} == {"get", "list", "watch"}
    policy_rules = [r for r in discovery["rules"] if r["apiGroups"] == ["admissionregistration.k8s.io"]]
    assert all(r["verbs"] == ["get"] for r in policy_rules)
    assert sorted(n for r in policy_rules for n in r["resourceNames"]) == ["tether-approvals", "tether-secret-access"]
    roles = of_kind(docs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        rules = _rules(role)
        assert ("", "secrets", "get") in rules
        assert not [r for r in rules if r[1] == "secrets" and r[2] != "get"], "Secrets: get by name only"
        assert all(r[2] != "*" and r[1] != "*" and r[0] != "*" for r in rules)
        assert {r[1] for r in rules} <= {"agentruns", "agenttools", "agentapprovals", "secrets", "events"} | {
            f"{k}/status" for k in ("agentruns", "agenttools", "agentapprovals")
        }
        assert not [r for r in rules if r[1] == "agentapprovals" and r[2] == "create"], "the operator never approves"
    bindings = of_kind(docs, "RoleBinding") + of_kind(docs, "ClusterRoleBinding")
    assert all(s["name"] == "tether" for b in bindings for s in b["subjects"])
    assert not of_kind(docs, "ServiceAccount")[1:], "the local executor needs no runner ServiceAccount"
    # Cluster-wide mode: one ClusterRole with the same namespaced rules.
    cluster = render(helm, "executor.kind=local", scope="clusterWide=true")
    assert not of_kind(cluster, "Role")
    assert len(of_kind(cluster, "ClusterRole")) == 2


def test_kubernetes_executor_is_the_default_and_its_rbac_gets_secrets_by_name_only(helm: Path) -> None:
    docs = render(helm, "watchNamespaces={team-a,team-b}")
    (deploy,) = of_kind(docs, "Deployment")
    env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TETHER_EXECUTOR"] == "kubernetes"
    assert env["TETHER_RUNTIME_IMAGE"] == "ghcr.io/tether-dev/tether-runtime:0.1.0"
    assert (env["TETHER_RUNNER_SERVICE_ACCOUNT"], env["TETHER_RUNNER_STORE_SECRET"]) == ("tether-runner", "tether-store")
    assert env["TETHER_POD_START_GRACE_SECONDS"] == "600"
    assert (env["TETHER_WARM_PODS"], env["TETHER_WARM_POD_IDLE_SECONDS"]) == ("0", "600"), "no warm pods unless asked"
    (warm,) = of_kind(render(helm, "executor.warmPods.count=2", "executor.warmPods.idleSeconds=300"), "Deployment")
    warm_env = {e["name"]: e.get("value") for e in warm["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (warm_env["TETHER_WARM_PODS"], warm_env["TETHER_WARM_POD_IDLE_SECONDS"]) == ("2", "300")
    for role in of_kind(docs, "Role"):
        assert _rules(role) == sorted(
            [
                *((g, r, v) for g in ("tether.dev",) for r in ("agentruns", "agenttools") for v in ("get", "list", "watch", "patch")),
                ("tether.dev", "agentruns", "delete"),  # a finished run past its spec.ttlSecondsAfterFinished
                *(("tether.dev", r, v) for r in ("agentruns/status", "agenttools/status") for v in ("get", "patch")),
                *(("tether.dev", "agentapprovals", v) for v in ("get", "list", "watch", "patch")),
                *(("tether.dev", "agentapprovals/status", v) for v in ("get", "patch")),
                *((g, "events", v) for g in ("", "events.k8s.io") for v in ("create", "patch")),
                *(("", "pods", v) for v in ("get", "list", "watch", "create", "delete", "patch")),
                *(("", "configmaps", v) for v in ("get", "create", "delete")),
                *(("", "serviceaccounts", v) for v in ("get", "create")),
                ("", "secrets", "get"),  # metadata only (PartialObjectMetadata): exists, labelled for Tether
                *(("", "secrets", v) for v in ("create", "delete")),  # an attempt's GPU tool tokens, made by the operator
            ]
        )
    runners = [a for a in of_kind(docs, "ServiceAccount") if a["metadata"]["name"] == "tether-runner"]
    assert sorted(a["metadata"]["namespace"] for a in runners) == ["team-a", "team-b"]
    assert all(a["automountServiceAccountToken"] is False for a in runners)


# ------------------------------------------------------------------- on the real apiserver


def can(kube: ControlPlane, release: Release, verb: str, resource: str, ns: str | None = None) -> bool:
    args = ["auth", "can-i", verb, resource, f"--as={release.subject}"]
    args += ["-n", ns] if ns else ["--all-namespaces"]
    return kube.kubectl(*args, check=False).stdout.strip() == "yes"


def test_rbac_allows_what_the_operator_needs(kube: ControlPlane, tether_release: Release) -> None:
    for ns in tether_release.served:
        for verb in ("get", "list", "watch", "patch"):
            assert can(kube, tether_release, verb, "agentruns.tether.dev", ns), (verb, ns)
            assert can(kube, tether_release, verb, "agenttools.tether.dev", ns), (verb, ns)
        assert can(kube, tether_release, "patch", "agentruns.tether.dev/status", ns)
        assert can(kube, tether_release, "patch", "agenttools.tether.dev/status", ns)
        assert can(kube, tether_release, "delete", "agentruns.tether.dev", ns)  # spec.ttlSecondsAfterFinished
        for verb in ("get", "list", "watch", "patch"):
            assert can(kube, tether_release, verb, "agentapprovals.tether.dev", ns), (verb, ns)
        assert can(kube, tether_release, "patch", "agentapprovals.tether.dev/status", ns)
        assert can(kube, tether_release, "get", "secrets", ns)
        assert can(kube, tether_release, "create", "events", ns)
    # kopf's cluster-wide scanning: read-only
    assert can(kube, tether_release, "list", "customresourcedefinitions.apiextensions.k8s.io")
    assert can(kube, tether_release, "watch", "namespaces")
    # whether the approvals policy is bound (by name only)
    assert can(kube, tether_release, "get", "validatingadmissionpolicybindings.admissionregistration.k8s.io/tether-approvals")
    assert not can(kube, tether_release, "get", "validatingadmissionpolicybindings.admissionregistration.k8s.io/other")


def test_rbac_denies_everything_else(kube: ControlPlane, tether_release: Release) -> None:
    other = tether_release.unserved
    # no Secrets outside the served namespaces, and never listed or watched anywhere
    assert not can(kube, tether_release, "get", "secrets", other)
    assert not can(kube, tether_release, "get", "secrets", tether_release.namespace)
    assert not can(kube, tether_release, "get", "secrets")
    for ns in tether_release.served:
        for verb in ("list", "watch", "create", "update", "delete"):
            assert not can(kube, tether_release, verb, "secrets", ns), (verb, ns)
    # nothing outside the served namespaces
    assert not can(kube, tether_release, "list", "agentruns.tether.dev", other)
    assert not can(kube, tether_release, "create", "events", other)
    # no cluster-wide writes at all, and none beyond its own CRs in served namespaces
    for verb in ("create", "update", "patch", "delete"):
        assert not can(kube, tether_release, verb, "customresourcedefinitions.apiextensions.k8s.io")
        assert not can(kube, tether_release, verb, "namespaces")
        assert not can(kube, tether_release, verb, "clusterroles.rbac.authorization.k8s.io")
        assert not can(kube, tether_release, verb, "agentruns.tether.dev")  # --all-namespaces
    for ns in tether_release.served:
        for resource in ("pods", "deployments.apps", "configmaps", "roles.rbac.authorization.k8s.io", "serviceaccounts", "jobs.batch"):
            assert not can(kube, tether_release, "create", resource, ns), resource
        assert not can(kube, tether_release, "create", "agentruns.tether.dev", ns)
        assert not can(kube, tether_release, "create", "agentapprovals.tether.dev", ns)  # the operator never approves
        assert not can(kube, tether_release, "delete", "agenttools.tether.dev", ns)
        assert not can(kube, tether_release, "delete", "agentapprovals.tether.dev", ns)
    assert not can(kube, tether_release, "create", "serviceaccounts/token", tether_release.namespace)
    assert not can(kube, tether_release, "impersonate", "serviceaccounts", tether_release.namespace)


def test_chart_installed_objects(kube: ControlPlane, tether_release: Release) -> None:
    out = kube.kubectl("get", "deployment,serviceaccount", "-n", tether_release.namespace, "-o", "name").stdout
    assert "deployment.apps/tether" in out and "serviceaccount/tether" in out
    crd = json.loads(kube.kubectl("get", "crd", "agentruns.tether.dev", "-o", "json").stdout)
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_tool_allowlist_runtime_env_and_secret_policy(helm: Path) -> None:
    docs = render(helm, "tools.allowedModules={shop.tools,billing}", "executor.runtimeEnv={HTTPS_PROXY}")
    (deploy,) = of_kind(docs, "Deployment")
    env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    # and helm test's tool (tests.enabled; test_chart_package.py)
    assert env["TETHER_TOOL_MODULES"] == "shop.tools,billing,tether.testing.weather" and env["TETHER_RUNTIME_ENV"] == "HTTPS_PROXY"
    policies = {p["metadata"]["name"] for p in of_kind(docs, "ValidatingAdmissionPolicy")}
    assert policies == {"tether-secret-access", "tether-allowed-code", "tether-approvals"}
    for binding in of_kind(docs, "ValidatingAdmissionPolicyBinding"):
        assert binding["metadata"]["name"] in policies and binding["spec"]["validationActions"] == ["Deny"]
        assert binding["spec"]["policyName"] == binding["metadata"]["name"]
    assert env["TETHER_SECRET_ACCESS_POLICY"] == "tether-secret-access" and env["TETHER_TENANCY"] == "multi-tenant"
    # Defaults: the image's declared tool modules (no variable), the policy on.
    default = render(helm)
    (deploy,) = of_kind(default, "Deployment")
    assert "TETHER_TOOL_MODULES" not in {e["name"] for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert of_kind(default, "ValidatingAdmissionPolicy")
    left = of_kind(render(helm, "secretAccessPolicy.enabled=false", "tenancy=single-tenant"), "ValidatingAdmissionPolicy")
    assert [p["metadata"]["name"] for p in left] == ["tether-approvals"]  # the approvals policy is not optional
    assert "allowedModules" in render(helm, "tools.allowedModules={os system}", check=False)  # the schema refuses it


def test_approval_policy_binds_the_approver_to_the_creator(helm: Path) -> None:
    docs = render(helm)
    (policy,) = [p for p in of_kind(docs, "ValidatingAdmissionPolicy") if p["metadata"]["name"] == "tether-approvals"]
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["agentapprovals"], ["CREATE"])
    assert "request.userInfo.username" in policy["spec"]["validations"][0]["expression"]
    (binding,) = [b for b in of_kind(docs, "ValidatingAdmissionPolicyBinding") if b["metadata"]["name"] == "tether-approvals"]
    assert binding["spec"]["policyName"] == "tether-approvals" and binding["spec"]["validationActions"] == ["Deny"]
    # it answers for the namespaces this release serves (another release binds its own)
    (served,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert served == {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}
    (deploy,) = of_kind(docs, "Deployment")
    env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TETHER_APPROVAL_POLICY_BINDING"] == "tether-approvals"


def test_the_run_view_is_off_by_default_and_its_reviews_come_only_with_it(helm: Path) -> None:
    """ui.enabled: the operator serves the run view (TETHER_UI_PORT) and its ClusterRole gains
    `create` on tokenreviews and subjectaccessreviews, nothing else; off: neither."""
    off = render(helm, "executor.kind=local")
    (discovery,) = of_kind(off, "ClusterRole")
    assert not [r for r in _rules(discovery) if r[0] in ("authentication.k8s.io", "authorization.k8s.io")]
    (deployment,) = of_kind(off, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert not [e for e in container["env"] if e["name"].startswith("TETHER_UI_")]
    on = render(helm, "executor.kind=local", "ui.enabled=true", "ui.port=8091")
    (discovery_on,) = of_kind(on, "ClusterRole")
    added = sorted(set(_rules(discovery_on)) - set(_rules(discovery)))
    assert added == [("authentication.k8s.io", "tokenreviews", "create"), ("authorization.k8s.io", "subjectaccessreviews", "create")]
    (container,) = of_kind(on, "Deployment")[0]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TETHER_UI_PORT"] == "8091" and env["TETHER_UI_SHOW_CONTENT"] == "false"
    assert {"name": "ui", "containerPort": 8091} in container["ports"]


def test_telemetry_reaches_the_operator_and_every_runs_runtime(helm: Path) -> None:
    """telemetry.otel: the operator's own OTEL_* variables and, as TETHER_RUNNER_OTEL, every run's
    (with the content switch); nothing by default; only OTEL_* names; the collector in the runner
    pods' NetworkPolicy."""
    docs = render(
        helm,
        "telemetry.otel.OTEL_EXPORTER_OTLP_ENDPOINT=http://otel.obs:4318",
        "telemetry.captureMessageContent=true",
        "networkPolicy.enabled=true",
        "networkPolicy.store[0].cidr=10.0.5.0/24",
        "networkPolicy.store[0].ports={443}",
        "networkPolicy.providers[0].cidr=203.0.113.10/32",
        "networkPolicy.providers[0].ports={443}",
        "networkPolicy.telemetry[0].cidr=10.0.9.0/24",
        "networkPolicy.telemetry[0].ports={4318}",
    )
    (deploy,) = of_kind(docs, "Deployment")
    env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel.obs:4318"
    assert json.loads(env["TETHER_RUNNER_OTEL"]) == {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel.obs:4318",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
    }
    (runners,) = [p for p in of_kind(docs, "NetworkPolicy") if p["metadata"]["name"].endswith("-runners")]
    assert {"to": [{"ipBlock": {"cidr": "10.0.9.0/24"}}], "ports": [{"protocol": "TCP", "port": 4318}]} in runners["spec"]["egress"]
    (deploy,) = of_kind(render(helm), "Deployment")
    assert not [e for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"] if "OTEL" in e["name"]]
    assert "'PATH' does not match pattern '^OTEL_" in render(helm, "telemetry.otel.PATH=/evil", check=False)  # the schema refuses it
