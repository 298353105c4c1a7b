"""Operator settings: small topic dataclasses, read from the environment the Helm chart sets."""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from tether.api import quantity_value
from tether.contract import AGENT_MODULES_ENV, TOOL_MODULES_ENV

from .cloudevents import sink_error
from .images import repository

# Namespaces Tether never serves, even cluster-wide: the cluster's own (a ClusterRole cannot leave
# them out, so the operator refuses runs there itself and the chart refuses to list them).
RESERVED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")


@dataclass(frozen=True)
class StoreSettings:
    url: str = ""
    """Store URL shared with the runtime: `file:///abs/dir` or `s3://bucket/prefix?endpoint_url=...`
    (env TETHER_STORE_URL). Empty: a directory under the system temp dir. Each namespace's runs
    use their own prefix below it (`for_namespace`)."""
    runner_secret: str = "tether-store"
    """Secret in each run's namespace with the runner pods' own store credentials
    (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), scoped by the admin to that namespace's prefix
    (env TETHER_RUNNER_STORE_SECRET; empty: the runner's pod identity, e.g. IRSA)."""

    def for_namespace(self, namespace: str) -> str:
        """The store of one namespace's runs: `<url>/<namespace>` (query parameters kept), so
        per-namespace credentials can be limited to that prefix."""
        base, sep, query = self.url.partition("?")
        return f"{base.rstrip('/')}/{namespace}{sep}{query}"


@dataclass(frozen=True)
class ExecutorSettings:
    kind: str = "kubernetes"
    """`kubernetes` (one pod per attempt; the default), `flyte` (a run per AgentRun on a Flyte 2
    backend) or `local` (development only: the runtime runs as a subprocess of the operator, with
    the operator's rights)."""
    concurrency: int = 4
    """Local executor: executions running at once; more wait in the queue (phase Pending, reason Queued)."""
    workdir: str = ""
    """Scratch directory for request files and attempt logs (default: under the temp dir)."""
    python: str = ""
    """Local executor: interpreter that runs `python -m tether exec` (default: the operator's own)."""
    runtime_env: tuple[str, ...] = ()
    """Extra variable names the local executor passes from its own environment to the runtime
    (env TETHER_RUNTIME_ENV, comma-separated); beyond these only harmless ones pass (see
    executors/local.py): the operator's credentials never reach agent or tool code."""
    runtime_image: str = "ghcr.io/tether-dev/tether-runtime:latest"
    """Kubernetes executor: image of runner pods when the spec names none (env TETHER_RUNTIME_IMAGE)."""
    image_pull_policy: str = "IfNotPresent"
    runner_service_account: str = "tether-runner"
    """Kubernetes executor: ServiceAccount of runner pods in each namespace (no token, no RBAC);
    created by the operator when missing (env TETHER_RUNNER_SERVICE_ACCOUNT)."""
    resync_seconds: float = 60.0
    """Kubernetes executor: look at a runner pod at least this often even without watch events
    (which carry the pod: a GET per pod and interval is what this costs the apiserver)."""
    pod_start_grace_seconds: float = 600.0
    """Kubernetes executor: how long a runner pod may stay unable to start (unschedulable, image
    not pullable, a Secret or key missing) before the run fails with that reason (env
    TETHER_POD_START_GRACE_SECONDS). Long enough for a cluster autoscaler to add a GPU node."""
    default_resources: dict[str, dict[str, str]] = field(default_factory=dict)
    """Kubernetes executor: `{requests: {cpu, memory}, limits: {memory}}` of runner pods for what
    their spec's `resources` does not name (env TETHER_DEFAULT_RESOURCES, JSON; chart value
    executor.defaultResources). Empty: none (a namespace's LimitRange, if any, applies)."""
    warm_pods: int = 0
    """Kubernetes executor: runner pods kept started per shape (namespace, image, framework,
    resources, Secrets...) for runs to claim: their imports done before the run is applied
    (executors/warm_pods.py; env TETHER_WARM_PODS, chart value executor.warmPods.count). 0: none."""
    warm_pod_idle_seconds: float = 600.0
    """How long a warm pod waits to be claimed before it exits (env TETHER_WARM_POD_IDLE_SECONDS)."""
    flyte: FlyteSettings = field(default_factory=lambda: FlyteSettings())


@dataclass(frozen=True)
class FlyteSettings:
    endpoint: str = ""
    """Flyte executor: the backend's gRPC/Connect endpoint, `host:port` or `dns:///host:port`
    (env TETHER_FLYTE_ENDPOINT)."""
    project: str = "tether-{namespace}"
    """Flyte project of a namespace's runs and of the runtime task they run: a template with
    `{namespace}` (env TETHER_FLYTE_PROJECT). A project per namespace keeps their Flyte secrets
    apart; a template without `{namespace}` is refused."""
    domain: str = "development"
    """Flyte domain (env TETHER_FLYTE_DOMAIN)."""
    insecure: bool = False
    """Plain-text connection to the backend (env TETHER_FLYTE_INSECURE; in-cluster only)."""
    service_account: str = ""
    """Kubernetes service account of the runs' pods, in the backend's namespace; may contain
    `{namespace}` (env TETHER_FLYTE_SERVICE_ACCOUNT; empty: the backend's default)."""


@dataclass(frozen=True)
class TimingSettings:
    poll_seconds: float = 0.5
    """Seconds between two reads of a running run's progress record right after it changed (and
    of a suspended run's approvals); doubles while nothing changes (runs.Cadence)."""
    max_poll_seconds: float = 8.0
    """The longest interval between two such reads, in seconds: a quiet run costs one store
    request per this many seconds. An attempt's start or end is seen at once (executor events)."""
    status_interval_seconds: float = 1.0
    """Minimum seconds between two status patches of one run, except phase changes (immediate)."""
    recheck_seconds: float = 5.0
    """Seconds before a waiting run (missing AgentTool or Secret) looks again; doubles while
    nothing changes, up to `max_recheck_seconds`."""
    max_recheck_seconds: float = 60.0
    """Longest wait between two checks of a waiting run, in seconds."""
    tool_interval_seconds: float = 30.0
    """Seconds between readiness checks of one AgentTool."""


@dataclass(frozen=True)
class Settings:
    namespaces: tuple[str, ...] = ()
    """Namespaces served (env TETHER_NAMESPACES, comma-separated; chart value watchNamespaces)."""
    cluster_wide: bool = False
    """Serve every namespace but RESERVED_NAMESPACES, with `namespaces` empty (env
    TETHER_CLUSTER_WIDE; chart value clusterWide). One of the two must be set."""
    propagated_labels: tuple[str, ...] = ()
    """AgentRun label keys copied onto what an executor creates (pods, ConfigMaps, Flyte runs); a
    key ending in "/" allows that prefix (env TETHER_PROPAGATED_LABELS, comma-separated; chart
    value executor.propagatedLabels). Empty: none; the operator's own tether.dev/* labels always."""
    store: StoreSettings = field(default_factory=StoreSettings)
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    timing: TimingSettings = field(default_factory=TimingSettings)
    metrics_port: int = 9090
    """Port of the Prometheus /metrics endpoint (env TETHER_METRICS_PORT; 0 disables)."""
    ui_port: int = 0
    """Port of the run view (env TETHER_UI_PORT, chart value ui.port when ui.enabled; 0: off):
    see tether_operator/ui.py."""
    ui_host: str = "127.0.0.1"
    """Address the run view binds (env TETHER_UI_HOST): loopback, reached by kubectl port-forward."""
    ui_show_content: bool = False
    """Message content on the run view's pages (env TETHER_UI_SHOW_CONTENT, chart ui.showContent)."""
    gpu_node_pools: dict[str, Any] = field(default_factory=dict)
    """GPU type -> {nodeSelector, tolerations} (env TETHER_GPU_NODE_POOLS, JSON)."""
    allowed_base_urls: tuple[str, ...] = ()
    """Base URLs a run's spec.model.baseURL may point under (env TETHER_ALLOWED_BASE_URLS, JSON
    list). Empty: any, except loopback, link-local, unspecified and cloud metadata addresses."""
    tool_modules: tuple[str, ...] | None = None
    """Modules AgentTool implementations may come from (env TETHER_TOOL_MODULES, comma-separated;
    chart value tools.allowedModules). None: the runtime image's default (the modules installed
    distributions declare in the entry-point group `tether.tools`), enforced by the runtime."""
    allow_auto_approve: bool = False
    """Honour `approval.defaultAction: approve` (env TETHER_ALLOW_AUTO_APPROVE, chart value
    approvals.allowAutoApprove). Off: such a tool is not Ready and a timeout can only decline."""
    approval_policy_binding: str = "tether-approvals"
    """The ValidatingAdmissionPolicyBinding that binds an AgentApproval's spec.decidedBy to its
    creator (env TETHER_APPROVAL_POLICY_BINDING, set by the chart). While it is missing no
    AgentApproval is honoured: anyone could name any approver."""
    allowed_images: tuple[str, ...] = ()
    """Images a run's `spec.image` and an AgentTool's `image` may name (env TETHER_ALLOWED_IMAGES,
    JSON list; chart value images.allowed): an entry ending in `/` allows every repository under
    it, any other entry one repository (any tag or digest) or, with a tag or digest, that image
    alone. The repository of `executor.runtime_image` is always allowed (`images_allowed`)."""
    agent_modules: tuple[str, ...] | None = None
    """Modules a run's `spec.agent` may come from (env TETHER_AGENT_MODULES, comma-separated;
    chart value agents.allowedModules). None: the runtime image's default (the modules installed
    distributions declare in the entry-point group `tether.agents`), enforced by the runtime."""
    tenancy: str = "multi-tenant"
    """`multi-tenant` (the default): runs that name Secrets wait (AdmissionPolicyMissing) unless
    the chart's Secret access admission policy and its binding are in place, and AgentApprovals
    are honoured only with the approvals policy binding. `single-tenant`: everyone who may create
    AgentRuns in a served namespace may use every Secret Tether may use there, and is trusted to
    name an approver truthfully (env TETHER_TENANCY, chart value tenancy)."""
    secret_access_policy: str = "tether-secret-access"
    """Name of that ValidatingAdmissionPolicy and of its binding (env TETHER_SECRET_ACCESS_POLICY)."""
    cloud_events_sink: str = ""
    """Where run and approval CloudEvents are POSTed (env TETHER_CLOUDEVENTS_SINK, chart value
    cloudEvents.sink; an http or https URL). Empty: none are sent."""
    runner_otel: dict[str, str] = field(default_factory=dict)
    """OTEL_* variables every run's runtime gets (env TETHER_RUNNER_OTEL, a JSON object; chart
    values telemetry.otel and telemetry.captureMessageContent): its traces (README.md, "Telemetry")."""

    @property
    def single_tenant(self) -> bool:
        return self.tenancy == "single-tenant"

    @property
    def images_allowed(self) -> tuple[str, ...]:
        own = repository(self.executor.runtime_image)
        return self.allowed_images if own in self.allowed_images else (own, *self.allowed_images)

    def startup_error(self) -> str | None:
        """Why the operator must not start with these settings, or None."""
        return (
            self._scope_error()
            or _resources_error(self.executor.default_resources)
            or self._tenancy_error()
            or sink_error(self.cloud_events_sink)
            or self._otel_error()
        )

    def _otel_error(self) -> str | None:
        # Only telemetry settings ride along: this must never become a way to set a run's PATH.
        wrong = sorted(k for k in self.runner_otel if not re.fullmatch(r"OTEL_[A-Z0-9_]+", k))
        return f"TETHER_RUNNER_OTEL names {', '.join(wrong)}: only OTEL_* variables (chart value telemetry.otel)" if wrong else None

    def _tenancy_error(self) -> str | None:
        # A typo must never silently change who may use which Secret.
        if self.tenancy in ("multi-tenant", "single-tenant"):
            return None
        return f"TETHER_TENANCY={self.tenancy!r}: expected multi-tenant or single-tenant (chart value tenancy)"

    def _scope_error(self) -> str | None:
        if self.cluster_wide and self.namespaces:
            return "TETHER_CLUSTER_WIDE and TETHER_NAMESPACES are both set: serve the whole cluster or the listed namespaces"
        if not self.cluster_wide and not self.namespaces:
            return "no namespace to serve: set TETHER_NAMESPACES (chart value watchNamespaces) or TETHER_CLUSTER_WIDE=true (clusterWide)"
        reserved = sorted(set(self.namespaces) & set(RESERVED_NAMESPACES))
        if reserved:
            return f"TETHER_NAMESPACES lists {', '.join(reserved)}: Tether never serves {', '.join(RESERVED_NAMESPACES)}"
        return None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        tmp = tempfile.gettempdir()

        def num(name: str, default: float) -> float:
            return float(env.get(name) or default)

        return cls(
            namespaces=tuple(n.strip() for n in env.get("TETHER_NAMESPACES", "").split(",") if n.strip()),
            cluster_wide=_flag(env.get("TETHER_CLUSTER_WIDE", "")),
            propagated_labels=_names(env.get("TETHER_PROPAGATED_LABELS", "")),
            store=StoreSettings(
                url=env.get("TETHER_STORE_URL") or f"file://{tmp}/tether-store",
                runner_secret=env.get("TETHER_RUNNER_STORE_SECRET", "tether-store"),
            ),
            executor=ExecutorSettings(
                kind=env.get("TETHER_EXECUTOR") or "kubernetes",
                concurrency=int(num("TETHER_CONCURRENCY", 4)),
                workdir=env.get("TETHER_WORKDIR") or f"{tmp}/tether-executions",
                python=env.get("TETHER_EXEC_PYTHON", ""),
                runtime_env=_names(env.get("TETHER_RUNTIME_ENV", "")),
                runtime_image=env.get("TETHER_RUNTIME_IMAGE") or ExecutorSettings.runtime_image,
                image_pull_policy=env.get("TETHER_RUNTIME_IMAGE_PULL_POLICY") or "IfNotPresent",
                runner_service_account=env.get("TETHER_RUNNER_SERVICE_ACCOUNT") or "tether-runner",
                resync_seconds=num("TETHER_RESYNC_SECONDS", 60.0),
                pod_start_grace_seconds=num("TETHER_POD_START_GRACE_SECONDS", 600.0),
                default_resources=json.loads(env.get("TETHER_DEFAULT_RESOURCES") or "{}"),
                warm_pods=int(num("TETHER_WARM_PODS", 0)),
                warm_pod_idle_seconds=num("TETHER_WARM_POD_IDLE_SECONDS", 600.0),
                flyte=FlyteSettings(
                    endpoint=env.get("TETHER_FLYTE_ENDPOINT", ""),
                    project=env.get("TETHER_FLYTE_PROJECT") or FlyteSettings.project,
                    domain=env.get("TETHER_FLYTE_DOMAIN") or "development",
                    insecure=env.get("TETHER_FLYTE_INSECURE", "").strip().lower() in ("1", "true", "yes"),
                    service_account=env.get("TETHER_FLYTE_SERVICE_ACCOUNT", ""),
                ),
            ),
            timing=TimingSettings(
                poll_seconds=num("TETHER_POLL_SECONDS", 0.5),
                max_poll_seconds=num("TETHER_MAX_POLL_SECONDS", 8.0),
                status_interval_seconds=num("TETHER_STATUS_INTERVAL_SECONDS", 1.0),
                recheck_seconds=num("TETHER_RECHECK_SECONDS", 5.0),
                max_recheck_seconds=num("TETHER_MAX_RECHECK_SECONDS", 60.0),
                tool_interval_seconds=num("TETHER_TOOL_INTERVAL_SECONDS", 30.0),
            ),
            metrics_port=int(num("TETHER_METRICS_PORT", 9090)),
            ui_port=int(num("TETHER_UI_PORT", 0)),
            ui_host=env.get("TETHER_UI_HOST") or "127.0.0.1",
            ui_show_content=_flag(env.get("TETHER_UI_SHOW_CONTENT", "")),
            gpu_node_pools=json.loads(env.get("TETHER_GPU_NODE_POOLS") or "{}"),
            allowed_base_urls=tuple(json.loads(env.get("TETHER_ALLOWED_BASE_URLS") or "[]")),
            tool_modules=_names(env[TOOL_MODULES_ENV]) if env.get(TOOL_MODULES_ENV, "").strip() else None,
            allow_auto_approve=env.get("TETHER_ALLOW_AUTO_APPROVE", "").strip().lower() in ("1", "true", "yes"),
            approval_policy_binding=env.get("TETHER_APPROVAL_POLICY_BINDING") or "tether-approvals",
            allowed_images=tuple(json.loads(env.get("TETHER_ALLOWED_IMAGES") or "[]")),
            agent_modules=_names(env[AGENT_MODULES_ENV]) if env.get(AGENT_MODULES_ENV, "").strip() else None,
            tenancy=env.get("TETHER_TENANCY", "").strip() or "multi-tenant",
            secret_access_policy=env.get("TETHER_SECRET_ACCESS_POLICY") or "tether-secret-access",
            cloud_events_sink=env.get("TETHER_CLOUDEVENTS_SINK", "").strip(),
            runner_otel={str(k): str(v) for k, v in json.loads(env.get("TETHER_RUNNER_OTEL") or "{}").items()},
        )


# What executor.defaultResources may set: the fields a run's spec.resources replaces.
_DEFAULT_RESOURCE_KEYS = {"requests": {"cpu", "memory"}, "limits": {"memory"}}


def _resources_error(defaults: dict[str, Any]) -> str | None:
    what = "TETHER_DEFAULT_RESOURCES (chart value executor.defaultResources)"
    if not isinstance(defaults, dict):
        return f"{what}: expected an object such as {{requests: {{cpu: 250m, memory: 512Mi}}, limits: {{memory: 2Gi}}}}"
    values: dict[str, Decimal] = {}
    for part, fields in defaults.items():
        allowed = _DEFAULT_RESOURCE_KEYS.get(part)
        if allowed is None or not isinstance(fields, dict) or not set(fields) <= allowed:
            return f"{what}: only requests.cpu, requests.memory and limits.memory may be set, not {part}: {fields}"
        for name, text in fields.items():
            try:
                values[f"{part}.{name}"] = quantity_value(str(text))
            except ValueError:
                return f"{what}: {part}.{name} {text!r} is not a Kubernetes quantity"
    if values.get("requests.memory", 0) > values.get("limits.memory", values.get("requests.memory", 0)):
        return f"{what}: requests.memory is above limits.memory (the apiserver would refuse every runner pod)"
    return None


def _flag(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes")


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())
