"""What an executor needs to place a run or a tool: node selector, tolerations, labels.

GPU node pools come from the chart (`gpuNodePools.<type>: {nodeSelector, tolerations}`) and are
merged into whatever the spec itself asks for. Labels for objects an executor creates are only
the AgentRun's labels the admin allows (chart value executor.propagatedLabels): a label selects,
so a copied `app: payments` would make a runner pod an endpoint of that Service or subject to
that NetworkPolicy. GitOps tracking metadata and tether.dev/* keys are never copied, allowed or
not: a copied `app.kubernetes.io/instance` or Argo CD / Flux label would make those tools adopt
(and prune, or re-create) the executor's objects, and tether.dev/* labels are the operator's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.api import Resources, Toleration

# Label and annotation keys owned by GitOps tools (exact keys, and prefixes ending in "/" or ".").
GITOPS_KEYS = (
    "app.kubernetes.io/instance",  # Argo CD's default tracking label
    "app.kubernetes.io/managed-by",
    "argocd.argoproj.io/",
    "kustomize.toolkit.fluxcd.io/",
    "helm.toolkit.fluxcd.io/",
    "fluxcd.io/",
    "kapp.k14s.io/",
    "kubectl.kubernetes.io/last-applied-configuration",
    "meta.helm.sh/",
    "helm.sh/",
)


def is_gitops_key(key: str) -> bool:
    return any(key == k or (k.endswith(("/", ".")) and key.startswith(k)) for k in GITOPS_KEYS)


OWN_PREFIX = "tether.dev/"


def _allowed(key: str, allowed: tuple[str, ...]) -> bool:
    return any(key == a or (a.endswith("/") and key.startswith(a)) for a in allowed)


def propagated(metadata: dict[str, str] | None, allowed: tuple[str, ...]) -> dict[str, str]:
    """Labels of a run to copy onto objects the operator creates for it: the keys in `allowed`
    (a key ending in "/" allows that prefix), never GitOps or tether.dev/* keys."""
    return {k: v for k, v in (metadata or {}).items() if _allowed(k, allowed) and not is_gitops_key(k) and not k.startswith(OWN_PREFIX)}


@dataclass
class Placement:
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)


def placement(
    resources: Resources | None,
    node_selector: dict[str, str] | None,
    tolerations: list[Toleration] | None,
    gpu_node_pools: dict[str, Any],
) -> Placement:
    """The spec's own scheduling plus the node pool of the GPU type it asks for."""
    out = Placement(dict(node_selector or {}), [t.wire() for t in tolerations or []])
    gpu = resources.gpu if resources else None
    if gpu is not None and gpu.count > 0 and gpu.type in gpu_node_pools:
        pool = gpu_node_pools[gpu.type] or {}
        out.node_selector.update(pool.get("nodeSelector") or {})
        out.tolerations += [t for t in pool.get("tolerations") or [] if t not in out.tolerations]
    return out
