"""Small pure pieces of the operator: conditions (kstatus), placement, GitOps metadata, metrics."""

from __future__ import annotations

from tether.api import Resources, Toleration
from tether_operator import conditions as C
from tether_operator import metrics
from tether_operator.placement import placement, propagated


def test_set_condition_moves_transition_time_only_on_change() -> None:
    first = C.set_condition([], C.READY, False, "Waiting", "x", generation=1)
    first[0]["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    same = C.set_condition(first, C.READY, False, "StillWaiting", "y", generation=2)
    assert same[0]["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert (same[0]["reason"], same[0]["observedGeneration"]) == ("StillWaiting", 2)
    flipped = C.set_condition(same, C.READY, True, "Done")
    assert flipped[0]["lastTransitionTime"] != "2020-01-01T00:00:00Z"
    assert first[0]["reason"] == "Waiting", "the input list is not modified"


def test_kstatus_never_reconciling_and_stalled_together() -> None:
    conds = C.kstatus([], reconciling=("Running", "attempt 1"))
    assert C.is_true(conds, C.RECONCILING) and not C.is_true(conds, C.STALLED)
    conds = C.kstatus(conds, stalled=("Failed", "boom"))
    assert C.is_true(conds, C.STALLED) and not C.is_true(conds, C.RECONCILING)
    assert not C.is_true(conds, C.READY)
    conds = C.kstatus([], ready=("Succeeded", "done"))
    assert C.is_true(conds, C.READY) and not C.is_true(conds, C.RECONCILING)


def test_gpu_pool_is_merged_into_placement() -> None:
    pools = {"A100": {"nodeSelector": {"pool": "a100"}, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}
    where = placement(
        Resources.model_validate({"gpu": {"type": "A100", "count": 1}}),
        {"zone": "b"},
        [Toleration(key="spot", operator="Exists")],
        pools,
    )
    assert where.node_selector == {"zone": "b", "pool": "a100"}
    assert [t["key"] for t in where.tolerations] == ["spot", "nvidia.com/gpu"]
    assert placement(None, None, None, pools).node_selector == {}


def test_gitops_tracking_metadata_is_not_propagated() -> None:
    labels = {
        "app.kubernetes.io/instance": "shop",
        "app.kubernetes.io/managed-by": "Helm",
        "argocd.argoproj.io/instance": "shop",
        "kustomize.toolkit.fluxcd.io/name": "shop",
        "helm.toolkit.fluxcd.io/name": "shop",
        "team": "payments",
        "app.kubernetes.io/name": "refunds",
    }
    assert propagated(labels) == {"team": "payments", "app.kubernetes.io/name": "refunds"}
    assert propagated({"argocd.argoproj.io/tracking-id": "x", "kubectl.kubernetes.io/last-applied-configuration": "{}"}) == {}


def test_metrics_text_format() -> None:
    metrics.SUBMISSIONS.inc()
    text = metrics.render(lambda: ["Running", "Running", "Queued"])
    assert "# TYPE tether_operator_submissions_total counter" in text
    assert 'tether_operator_executions{state="Running"} 2' in text
    assert "tether_operator_submit_seconds_count" in text
