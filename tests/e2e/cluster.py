"""Driving the e2e kind cluster with kubectl and helm (on $PATH, $KUBECONFIG set by run.sh)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tether.testing.fake_provider import BASE_PATHS

REPO = Path(__file__).resolve().parents[2]
NS = "tether-e2e"
INFRA = "tether-e2e-infra"
RELEASE = "tether"
FAKE = "http://fake-provider.tether-e2e-infra.svc.cluster.local:8080"
FRAMEWORKS = os.environ.get("TETHER_E2E_FRAMEWORKS", "").split() or sorted(
    p.stem for p in (REPO / "envs").glob("*.txt") if p.stem != "core"
)


PRELOADED = "openai"  # run.sh install loads its image onto both workers: the chart's runtime image


def image(framework: str) -> str:
    return f"tether-e2e/examples-{framework}:e2e"


@contextmanager
def framework_image(framework: str) -> Iterator[None]:
    """The framework's examples image on the CPU worker while the block runs, removed after (ten
    unpacked images do not fit on a node's disk; runs without a GPU land on the CPU worker)."""
    if framework == PRELOADED:
        yield
        return
    worker = kubectl(
        "get", "nodes", "-l", "!node-role.kubernetes.io/control-plane,!cloud.google.com/gke-accelerator",
        "-o", "jsonpath={.items[0].metadata.name}",
    ).strip()  # fmt: skip
    loaded = subprocess.run([str(REPO / "tests/e2e/run.sh"), "load", worker, image(framework)], capture_output=True, text=True, timeout=900)
    if loaded.returncode != 0:
        raise AssertionError(f"loading {image(framework)} onto {worker} failed:\n{loaded.stderr[-3000:]}")
    try:
        yield
    finally:
        drop_image(worker, image(framework))


def drop_image(node: str, ref: str, timeout: float = 300) -> None:
    """Remove an image from a node once no container uses it: containers of the runs just deleted
    go after their pods, and an image they hold stays on the disk the next framework needs."""
    image_id = crictl(node, "inspecti", "-o", "go-template", "--template", "{{.status.id}}", ref).strip()

    def unused() -> bool:
        containers = json.loads(crictl(node, "ps", "-a", "-o", "json"))["containers"]
        return not any(image_id in (c.get("imageRef"), c.get("image", {}).get("image")) for c in containers)

    poll(f"no container on {node} uses {ref}", unused, timeout=timeout, every=2)
    crictl(node, "rmi", ref)


def crictl(node: str, *args: str) -> str:
    proc = subprocess.run(["docker", "exec", node, "crictl", *args], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"crictl {' '.join(args)} on {node} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def kubectl(*args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> str:
    proc = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def approve(run: str, approval_id: str, decision: str = "approve", namespace: str = NS) -> None:
    """Decide one approval as the kubeconfig's user: an AgentApproval whose decidedBy is who the
    apiserver says we are (the chart's admission policy refuses anyone else)."""
    me = kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").strip()
    spec = {"run": run, "approvalId": approval_id, "decision": decision, "decidedBy": me}
    doc = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentApproval", "metadata": {"generateName": f"{run}-"}, "spec": spec}
    kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(doc))


def helm(*args: str, timeout: float = 600) -> str:
    proc = subprocess.run(["helm", *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def get(kind: str, name: str, namespace: str = NS) -> dict[str, Any] | None:
    out = kubectl("get", kind, name, "-n", namespace, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


def poll(what: str, probe: Callable[[], Any], timeout: float = 300, every: float = 0.5) -> Any:
    """probe() until it returns something truthy; its value. Fails naming `what` after timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")


def example(framework: str, stem: str, run_name: str, **spec: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """An example's AgentRun (renamed, pointed at the in-cluster fake provider, on the framework's
    image) and its AgentTools, as manifests."""
    docs = [d for d in yaml.safe_load_all((REPO / "examples" / framework / f"{stem}.yaml").read_text()) if d]
    run = next(d for d in docs if d["kind"] == "AgentRun")
    tools = [d for d in docs if d["kind"] == "AgentTool"]
    run["metadata"] = {"name": run_name, "namespace": NS}
    run["spec"]["model"]["baseURL"] = FAKE + BASE_PATHS[run["spec"]["model"]["provider"]]
    run["spec"]["image"] = image(framework)
    run["spec"].update(spec)
    for t in tools:
        t["metadata"]["namespace"] = NS
    return run, tools


def ensure_key_secret(run: dict[str, Any]) -> None:
    """The provider key Secret an example names (any value: the fake provider needs one sent)."""
    ref = run["spec"]["model"].get("apiKeySecretRef")
    if not ref:
        return
    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": ref["name"], "namespace": NS, "labels": {"tether.dev/usable": "true"}},
        "stringData": {ref["key"]: "fake-key-no-real-model"},
    }
    kubectl("apply", "-f", "-", input=json.dumps(manifest))


def apply(run: dict[str, Any], tools: list[dict[str, Any]]) -> None:
    ensure_key_secret(run)
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [*tools, run]}))


def replace_tools(tools: list[dict[str, Any]]) -> None:
    """AgentTools as given, in place of those of the same names (a tool's spec is immutable: each is
    deleted, then created anew; no finalizer holds a tool)."""
    for tool in tools:
        kubectl("delete", "agenttool", tool["metadata"]["name"], "-n", NS, "--ignore-not-found", "--wait=true")
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": tools}))


def delete_run(name: str) -> None:
    kubectl("delete", "agentrun", name, "-n", NS, "--ignore-not-found", "--wait=true", timeout=180)


def status(name: str) -> dict[str, Any]:
    obj = get("agentrun", name)
    return (obj or {}).get("status") or {}


def wait_phase(name: str, *phases: str, timeout: float = 300) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        s = status(name)
        if s.get("phase") == "Failed" and "Failed" not in phases:
            raise AssertionError(f"AgentRun {name} failed: {json.dumps(s)[:2000]}\n{describe(name)}")
        return s if s.get("phase") in phases else None

    try:
        found: dict[str, Any] = poll(f"AgentRun {name} in {phases}", done, timeout)
        return found
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{describe(name)}") from None


def pods(name: str) -> list[dict[str, Any]]:
    out = kubectl("get", "pods", "-n", NS, "-l", f"tether.dev/run={name},tether.dev/execution", "-o", "json")
    return sorted(json.loads(out)["items"], key=lambda p: int(p["metadata"]["labels"].get("tether.dev/attempt", 0)))


def describe(name: str) -> str:
    """What to look at when a run is stuck: its status, its pods and their logs, the operator's log."""
    parts = [json.dumps(status(name), indent=1)[:3000]]
    for p in pods(name):
        pn = p["metadata"]["name"]
        parts.append(f"--- pod {pn}: {json.dumps(p.get('status', {}).get('containerStatuses'))[:1500]}")
        parts.append(kubectl("logs", "-n", NS, pn, "--tail=40", check=False))
    parts.append("--- operator log")
    parts.append(kubectl("logs", "-n", NS, f"deploy/{RELEASE}", "--tail=60", check=False))
    return "\n".join(parts)


def fake_provider(path: str, method: str = "GET", body: Any = None) -> Any:
    """A call to the fake provider's control API, from inside its pod (``body``: sent as JSON)."""
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    code = (
        "import json, urllib.request as u; "
        f"r = u.urlopen(u.Request('http://127.0.0.1:8080{path}', method='{method}', data={data!r}, "
        "headers={'content-type': 'application/json'})); "
        "print(r.read().decode() or 'null')"
    )
    return json.loads(kubectl("exec", "-n", INFRA, "deploy/fake-provider", "--", "python", "-c", code))


def ledger() -> list[dict[str, Any]]:
    out = fake_provider("/_control/ledger")
    return list(out["calls"] if isinstance(out, dict) and "calls" in out else out)


@contextmanager
def warm_pods(count: int = 1) -> Iterator[None]:
    """The release with chart value executor.warmPods.count (the operator restarted with it);
    afterwards none again, and the warm pods left waiting deleted (they would wait their idle time)."""

    def release(n: int) -> None:
        helm("upgrade", RELEASE, str(REPO / "charts" / "tether"), "-n", NS, "--reuse-values",
             "--set", f"executor.warmPods.count={n}", "--wait", "--timeout", "300s")  # fmt: skip
        kubectl("-n", NS, "rollout", "status", f"deploy/{RELEASE}", "--timeout=180s", timeout=200)

    release(count)
    try:
        yield
    finally:
        release(0)
        kubectl("delete", "pods", "-n", NS, "-l", "tether.dev/warm", "--wait=false")


def warm_waiting() -> list[dict[str, Any]]:
    """Warm pods started and waiting at their imports (their log says so)."""
    out = kubectl("get", "pods", "-n", NS, "-l", "tether.dev/warm", "-o", "json")
    running = [p for p in json.loads(out)["items"] if (p.get("status") or {}).get("phase") == "Running"]
    return [p for p in running if "waiting for a run to claim it" in kubectl("logs", "-n", NS, p["metadata"]["name"], check=False)]
