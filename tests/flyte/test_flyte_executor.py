"""The Flyte executor against a real Flyte 2 backend (flyteorg/flyte's manager, built from source)
on the bare apiserver: no kubelet, so runs are accepted, their TaskAction CRs and pods are made,
and they stay queued. Checked through the SDK and in what the backend stores: submission,
idempotent resubmission by a second executor (an operator restart), the per-run overrides in the
TaskAction CR and the pod the backend makes from it, watch, abort, a run's own image, and each
namespace's own Flyte project: its Flyte secrets (a run's Secret references, its store
credentials) injected by the backend's pod webhook are that namespace's, never another's."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.flyte_backend import NAMESPACE, Backend
from tests.support.wait import wait_for
from tether.api import AgentRunSpec
from tether.contract import ExecRequest
from tether_operator.executors.base import ExecutionState, SecretFile, Submission, execution_name
from tether_operator.executors.flyte import RUNTIME_TASK, FlyteExecutor, flyte_secret_name, task_version

pytestmark = pytest.mark.kube

IMAGE = "registry.example/tether-runtime:flyte-test"
REPO = Path(__file__).resolve().parents[2]


NS = "team-a"


def submission(namespace: str = NS, **spec: Any) -> Submission:
    uid = str(uuid.uuid4())
    body = {"framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hello", **spec}
    request = ExecRequest(run_id=uid, namespace=namespace, name=f"run-{uid[:6]}", spec=AgentRunSpec.model_validate(body))
    return Submission(
        name=execution_name(uid),
        request=request,
        retries=3,
        timeout_seconds=900,
        labels={"tether.dev/run": request.name},
        store_url=f"s3://runs/{namespace}?endpoint_url=http://s3.example:9000",
    )


def executor(backend: Backend, **kw: Any) -> FlyteExecutor:
    return FlyteExecutor(endpoint=backend.endpoint, runtime_image=IMAGE, insecure=True, domain="development", **kw)


def run(coro: Any) -> Any:
    return asyncio.get_event_loop().run_until_complete(coro)


@pytest.fixture(scope="module")
def loop() -> Any:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()


def taskactions(backend: Backend) -> list[dict[str, Any]]:
    out = backend.kube.kubectl("get", "taskactions.flyte.org", "-A", "-o", "json")
    return list(json.loads(out.stdout)["items"])


def of_run(backend: Backend, run_name: str) -> Callable[[], list[dict[str, Any]]]:
    return lambda: [t for t in taskactions(backend) if t["spec"].get("runName") == run_name]


def cr_template(action: dict[str, Any]) -> dict[str, Any]:
    """The task template a TaskAction CR carries (serialized protobuf, base64 in JSON)."""
    import base64

    from flyteidl2.core import tasks_pb2
    from google.protobuf import json_format

    raw = base64.b64decode(action["spec"]["taskTemplate"])
    return dict(json_format.MessageToDict(tasks_pb2.TaskTemplate.FromString(raw)))


def pods(backend: Backend) -> list[dict[str, Any]]:
    return list(json.loads(backend.kube.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"])


def test_submit_creates_one_queued_run_and_a_restart_adopts_it(backend: Backend, loop: Any) -> None:
    sub = submission()
    first = executor(backend)
    status = run(first.submit(sub))
    assert status.state is ExecutionState.QUEUED, status
    assert status.url and sub.name in status.url
    actions = wait_for(of_run(backend, sub.name), timeout=60, what=f"the TaskAction CR of run {sub.name}")
    assert len(actions) == 1
    assert status.url.endswith(f"/project/tether-{NS}/runs/{sub.name}")  # the namespace's own project
    # The runtime task was deployed once, under this Tether version and image, in that project.
    import flyte.remote

    with first.scope(NS):
        task = run(flyte.remote.Task.get(RUNTIME_TASK, version=task_version(first.version, IMAGE)).fetch.aio())
    assert task.pb2.spec.task_template.container.image == IMAGE
    assert task.pb2.task_id.project == f"tether-{NS}"

    # An operator restart: a new executor, the same submission -> the same run, no second one.
    second = executor(backend)
    again = run(second.submit(sub))
    assert again.state is ExecutionState.QUEUED
    assert again.url == status.url
    with second.scope(NS):
        runs = [r for r in run(_list_runs()) if r.name.startswith(sub.name)]
    assert [r.name for r in runs] == [sub.name]
    assert len(of_run(backend, sub.name)()) == 1
    status = run(second.status(sub.name))
    assert status is not None and status.state is ExecutionState.QUEUED
    assert "queued" in status.message or "waiting" in status.message or "initializing" in status.message, status.message


async def _list_runs() -> list[Any]:
    import flyte.remote

    return [r async for r in flyte.remote.Run.listall.aio()]


def test_overrides_reach_the_stored_spec_and_the_pod(backend: Backend, loop: Any) -> None:
    sub = submission(resources={"cpu": "2", "memory": "3Gi", "gpu": {"type": "A100", "count": 1}})
    sub.env = {"TETHER_PROGRESS": "1"}
    sub.secret_files = [SecretFile("openai", "apiKey", "model/apiKey"), SecretFile("crm", "token", "tools/lookup/CRM_TOKEN")]
    ex = executor(backend, store_secret="tether-store", service_account="runner-{namespace}")
    ex.tool_modules = ("shop.tools", "crm")  # the chart's tools.allowedModules
    run(ex.submit(sub))
    action = wait_for(of_run(backend, sub.name), timeout=60, what="the TaskAction CR")[0]
    stored = json.dumps(action["spec"])
    # What the backend stores for the run: the overridden task template.
    import flyte.remote

    with ex.scope(NS):
        details = run(flyte.remote.Run.get.aio(sub.name))
        stored_spec = run(_task_spec_of(sub.name))  # what the run service stored: the CR carries the same
    assert details.name == sub.name
    template = cr_template(action)
    for key in ("securityContext", "metadata", "extendedResources"):
        assert template[key] == stored_spec[key], key
    for key in ("env", "resources", "image"):
        assert template["container"][key] == stored_spec["container"][key], key
    container = template["container"]
    env = {e["key"]: e["value"] for e in container.get("env", [])}
    assert env["TETHER_PROGRESS"] == "1" and env["TETHER_FLYTE_REMOTE"] == "1"
    assert env["TETHER_TOOL_MODULES"] == "shop.tools,crm"  # the runtime in the pod enforces it
    assert json.loads(env["TETHER_SECRETS_FROM_ENV"]) == {"model/apiKey": "TETHER_SECRET_0", "tools/lookup/CRM_TOKEN": "TETHER_SECRET_1"}
    requests = {r["name"]: r["value"] for r in container["resources"]["requests"]}
    assert requests == {"CPU": "2", "MEMORY": "3Gi", "GPU": "1"}
    assert template["extendedResources"]["gpuAccelerator"]["device"] == "nvidia-tesla-a100"  # the SDK's name for A100
    assert template["metadata"]["retries"]["retries"] == 3
    assert template["metadata"]["timeout"] == "900s"
    # Flyte secrets of the namespace's project, one name per Secret and key (no group: the backend
    # ignores it), and the namespace's own store credentials; its own service account.
    secrets = template["securityContext"]["secrets"]
    assert [(s.get("group"), s["key"], s["envVar"]) for s in secrets] == [
        (None, "openai__apiKey", "TETHER_SECRET_0"),
        (None, "crm__token", "TETHER_SECRET_1"),
        (None, "tether-store__AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID"),
        (None, "tether-store__AWS_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY"),
    ]
    assert template["securityContext"]["runAs"]["k8sServiceAccount"] == f"runner-{NS}"
    assert "sk-" not in stored  # references only, never a value
    # The pod the backend's executor makes from the TaskAction (no kubelet: it stays Pending).
    pod = wait_for(lambda: [p for p in pods(backend) if sub.name in json.dumps(p["metadata"])], timeout=90, what="the run's pod")[0]
    main = pod["spec"]["containers"][0]
    assert main["image"] == IMAGE
    assert main["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert main["resources"]["requests"]["cpu"] == "2" and main["resources"]["requests"]["memory"] == "3Gi"
    assert {"key": "k8s.amazonaws.com/accelerator", "operator": "Equal", "value": "nvidia-tesla-a100", "effect": "NoSchedule"} in pod[
        "spec"
    ]["tolerations"]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "k8s.amazonaws.com/accelerator", "operator": "In", "values": ["nvidia-tesla-a100"]}]}]
    pod_env = {e["name"]: e.get("value") for e in main["env"]}
    assert pod_env["TETHER_FLYTE_REMOTE"] == "1" and pod_env["TETHER_PROGRESS"] == "1"
    assert pod["spec"]["serviceAccountName"] == f"runner-{NS}"
    assert pod["metadata"]["labels"]["project"] == f"tether-{NS}"  # what the secret webhook scopes by
    assert pod["status"].get("phase", "Pending") == "Pending"


async def _task_spec_of(run_name: str) -> dict[str, Any]:
    """The task template the backend stored for the run's root action (as JSON)."""
    import flyte.remote
    from google.protobuf import json_format

    details = await flyte.remote.RunDetails.get.aio(name=run_name)
    spec = details.pb2.action.task  # the TaskSpec the run was created with
    return dict(json_format.MessageToDict(spec.task_template))


def test_abort_stops_the_run(backend: Backend, loop: Any) -> None:
    sub = submission()
    ex = executor(backend)
    run(ex.submit(sub))
    wait_for(of_run(backend, sub.name), timeout=60, what="the TaskAction CR")
    run(ex.abort(sub.name, NS))
    import flyte.remote

    def aborted() -> bool:
        with ex.scope(NS):
            return "ABORT" in str(run(flyte.remote.Run.get.aio(sub.name)).phase).upper()

    wait_for(aborted, timeout=60, what=f"run {sub.name} aborted")
    # A restarted operator sees it aborted, and submitting it again adopts it (no new run).
    later = executor(backend)
    status = run(later.submit(sub))
    assert status.state is ExecutionState.ABORTED, status
    with later.scope(NS):
        assert [r.name for r in run(_list_runs()) if r.name.startswith(sub.name)] == [sub.name]


def test_a_runs_own_image_gets_its_own_task_version(backend: Backend, loop: Any) -> None:
    own = "registry.example/team-a/agent:7"
    sub = submission(image=own)
    ex = executor(backend)
    run(ex.submit(sub))
    with ex.scope(NS):
        template = run(_task_spec_of(sub.name))
    assert template["container"]["image"] == own
    assert template["id"]["version"] == task_version(ex.version, own)
    assert NAMESPACE  # the backend's TaskAction namespace


def test_a_tool_with_its_own_image_and_gpu_is_a_child_task_on_the_a100_pool(backend: Backend, loop: Any) -> None:
    from tether.api import AgentToolSpec

    embed = AgentToolSpec.model_validate(
        {
            "description": "Embed",
            "implementation": "shop.tools:embed",
            "image": "registry.example/embed:3",
            "version": "3",
            "cache": "auto",
            "resources": {"memory": "8Gi", "gpu": {"type": "A100", "count": 1}},
        }
    )
    sub = submission(tools=["embed"], resources={"cpu": "1"})
    sub.request.tools = {"embed": embed}
    sub.secret_files = [SecretFile("openai", "apiKey", "model/apiKey"), SecretFile("embed-creds", "token", "tools/embed/TOKEN")]
    ex = executor(backend)
    run(ex.submit(sub))
    with ex.scope(NS):
        template = run(_task_spec_of(sub.name))
    env = {e["key"]: e["value"] for e in template["container"]["env"]}
    refs = json.loads(env["TETHER_FLYTE_TOOL_TASKS"])
    version = task_version(ex.version, "registry.example/embed:3")
    assert refs == {
        "embed": {
            "task": "tether-tool.tool_call",
            "version": version,
            "resources": {"memory": "8Gi", "gpu": "A100:1"},
            "cache": "3",
            "secrets": [[None, "embed-creds__token", "tools/embed/TOKEN", "TETHER_SECRET_EMBED_0"]],
        }
    }
    # The agent stays on CPU and never gets the tool's secret; the tool task is deployed with its image.
    assert [s["key"] for s in template["securityContext"]["secrets"]] == ["openai__apiKey"]
    assert "extendedResources" not in template
    import flyte
    import flyte.remote

    with ex.scope(NS):
        tool = run(flyte.remote.Task.get("tether-tool.tool_call", version=version).fetch.aio())
        assert tool.pb2.spec.task_template.container.image == "registry.example/embed:3"
        # The tool task as the runtime calls it (the same override): the backend puts it on the A100
        # pool with its own GPU, its cache keyed by the tool's version.
        name = f"{sub.name}-embed"
        child = tool.override(
            resources=flyte.Resources(memory="8Gi", gpu="A100:1"), cache=flyte.Cache(behavior="override", version_override="3")
        )
        run(flyte.with_runcontext(name=name).run.aio(child, implementation="shop.tools:embed", tool="embed", arguments="{}"))
        stored = run(_task_spec_of(name))
    assert stored["extendedResources"]["gpuAccelerator"]["device"] == "nvidia-tesla-a100"  # the backend's name for A100
    assert stored["metadata"]["discoverable"] is True and stored["metadata"]["discoveryVersion"] == "3"
    pod = wait_for(lambda: [p for p in pods(backend) if name in json.dumps(p["metadata"])], timeout=90, what="the tool task's pod")[0]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["spec"]["containers"][0]["image"] == "registry.example/embed:3"


def test_the_runtime_task_runs_and_its_outcome_is_read(backend: Backend, loop: Any) -> None:
    """No kubelet here, so the test plays it: the pod's container (the real Flyte runtime running
    tether's agent_run) runs as a local process against the backend and the S3 store; the backend
    completes the run from what it wrote, and the executor reads the attempt's outcome from the
    run's output: a terminal failure (an AgentTool that does not exist), with its message."""
    sub = submission(tools=["missing"])
    sub.store_url = f"s3://{backend.bucket}/tether/{NS}?endpoint_url={backend.s3}"
    ex = executor(backend)
    run(ex.submit(sub))
    pod = wait_for(
        lambda: [p for p in pods(backend) if p["metadata"].get("labels", {}).get("flyte.org/run") == sub.name], timeout=90, what="the pod"
    )[0]
    assert backend.play_kubelet(pod) == 0  # the task ran to its end: the outcome is its output

    def finished() -> Any:
        status = run(ex.status(sub.name))
        return status if status is not None and status.state.finished else None

    status = wait_for(finished, timeout=90, what="the run's outcome")
    assert status.state is ExecutionState.FAILED and status.exit_code == 2
    assert status.message == "terminal failure: ConfigError: unknown AgentTool(s): missing"
    assert status.attempts == 1


SLOW_TOOLS = """
print("slow_tools: importing", flush=True)  # the test kills the container here, as the OOM killer would
import time

time.sleep(300)


def lookup() -> str:
    return "found"
"""


def test_a_pod_that_dies_with_a_bare_exit_code_is_an_attempt_and_retries_run_out(backend: Backend, loop: Any, tmp_path: Any) -> None:
    """A runner pod SIGKILLed (exit code 137, no error file: out of memory, a lost node) is taken by
    the backend for a system failure: it makes the pod again under the same name, its attempt count
    stays 1, and it would do so for ever. The runtime counts its starts in the run's store: with
    retries 1, the third start runs nothing and ends the run, which fails after 3 attempts with
    "retries exhausted"."""
    from tether.api import AgentToolSpec

    (tmp_path / "slow_tools.py").write_text(SLOW_TOOLS)
    sub = submission(tools=["lookup"], retries=1)
    sub.retries = 1
    sub.request.tools = {"lookup": AgentToolSpec.model_validate({"description": "Look up", "implementation": "slow_tools:lookup"})}
    sub.store_url = f"s3://{backend.bucket}/tether/{NS}?endpoint_url={backend.s3}"
    ex = executor(backend)
    ex.tool_modules = ("slow_tools",)
    run(ex.submit(sub))
    seen: list[str] = []

    def new_pod() -> list[dict[str, Any]]:
        return [
            p
            for p in pods(backend)
            if p["metadata"].get("labels", {}).get("flyte.org/run") == sub.name and p["metadata"]["uid"] not in seen
        ]

    codes, made = [], []
    for _ in range(3):
        pod = wait_for(new_pod, timeout=90, what="the run's pod (made again after a kill)")[0]
        seen.append(pod["metadata"]["uid"])
        made.append((pod["metadata"]["name"], pod["metadata"]["labels"]["attempt"]))
        codes.append(backend.play_kubelet(pod, {"PYTHONPATH": str(tmp_path)}, kill_on="slow_tools: importing"))
    assert len(set(made)) == 1 and made[0][1] == "1", made  # the backend's view: one pod, attempt 1
    assert codes == [137, 137, 0], codes  # the third start imported nothing and ended the run

    def finished() -> Any:
        status = run(ex.status(sub.name))
        return status if status is not None and status.state.finished else None

    status = wait_for(finished, timeout=90, what="the run's outcome")
    assert status.state is ExecutionState.FAILED and status.exit_code == 2, status
    assert (status.attempts, status.failures) == (3, 2), status
    assert status.message.startswith("attempt 3: retries exhausted (1); the Flyte backend started the task again"), status.message
    assert not new_pod(), "a pod was made after the run ended"


def test_each_namespace_gets_its_own_flyte_secrets_and_never_anothers(backend: Backend, loop: Any) -> None:
    """Two namespaces hold a Flyte secret of the same name (the same Secret and key) with their own
    values, and their own store credentials; a third holds none. With the backend's pod webhook on
    (as in a cluster), each run's pod is given its own namespace's values, and the third's run is
    given nothing: its pod is refused for the missing secret and the run fails saying so."""
    import flyte.remote

    ex = executor(backend, store_secret="tether-store")
    run(ex._init())  # the SDK connected, as the executor connects before its first call
    values = {ns: {"db": f"db-password-of-{ns}", "id": f"AKIA-{ns}", "key": f"store-key-of-{ns}"} for ns in ("sec-a", "sec-b")}
    for ns, v in values.items():
        with ex.scope(ns):
            for name, value in (
                (flyte_secret_name("db", "password"), v["db"]),
                (flyte_secret_name("tether-store", "AWS_ACCESS_KEY_ID"), v["id"]),
                (flyte_secret_name("tether-store", "AWS_SECRET_ACCESS_KEY"), v["key"]),
            ):
                run(flyte.remote.Secret.create.aio(name=name, value=value))
    everything = [x for v in values.values() for x in v.values()]

    def pod_of(sub: Submission) -> Callable[[], list[dict[str, Any]]]:
        return lambda: [p for p in pods(backend) if p["metadata"].get("labels", {}).get("flyte.org/run") == sub.name]

    with backend.secret_webhook():
        subs = {}
        for ns in ("sec-a", "sec-b", "sec-c"):
            sub = submission(ns)
            sub.secret_files = [SecretFile("db", "password", "model/apiKey")]
            run(ex.submit(sub))
            subs[ns] = sub
        for ns, v in values.items():
            pod = wait_for(pod_of(subs[ns]), timeout=90, what=f"the pod of {ns}'s run")[0]
            assert pod["metadata"]["labels"]["project"] == f"tether-{ns}"
            env = {e["name"]: e.get("value") for c in pod["spec"]["containers"] for e in c.get("env", [])}
            assert env["TETHER_SECRET_0"] == v["db"]  # its own namespace's value for Secret db, key password
            assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == (v["id"], v["key"])
            theirs = [x for x in everything if x not in v.values()]
            assert not [x for x in theirs if x in json.dumps(pod)], f"{ns}'s pod holds another namespace's secret"

        # sec-c has no such Flyte secrets: the webhook refuses its pod, the run fails naming a missing
        # secret (never filled from a neighbour's project), and no pod of it exists.
        def finished() -> Any:
            status = run(ex.status(subs["sec-c"].name))
            return status if status is not None and status.state.finished else None

        status = wait_for(finished, timeout=90, what="sec-c's run failing for its missing secret")
        assert status.state is ExecutionState.FAILED
        assert "denied the request" in status.message, status.message
        # the first missing one it met (sec-c has none of the three it asks for)
        asked = (
            flyte_secret_name("db", "password"),
            *(flyte_secret_name("tether-store", k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")),
        )
        assert any(f'key:"{name}"' in status.message for name in asked), status.message
        assert not pod_of(subs["sec-c"])()


RESUME_TOOLS = """
import os


def lookup(order: str) -> str:
    \"\"\"Look an order up.\"\"\"
    with open(os.environ["EFFECTS"], "a") as f:
        f.write(order + "\\n")
    return f"{order}: shipped"
"""

RESUME_SCRIPT = {
    "conversations": [
        {
            "match": "",
            "turns": [
                {"tool_calls": [{"name": "lookup", "arguments": {"order": "A1"}}]},
                {"text_from_tool_results": True, "text": "Found:"},
            ],
        }
    ]
}


def test_a_flyte_retry_of_a_killed_task_pod_resumes_from_the_journal(backend: Backend, loop: Any, tmp_path: Any) -> None:
    """The task pod SIGKILLed once its first turn and its tool call are recorded (as the OOM killer
    or a lost node would): the backend makes the pod again, and that start replays the journal —
    the turn is not asked again, the tool not run again — and only the last turn is live."""
    from tests.support.tool_runner_pod import ADAPTER
    from tether.api import AgentToolSpec
    from tether.journal import read_records
    from tether.stores import open_store
    from tether.testing import FakeProvider

    (tmp_path / "resume_tools.py").write_text(RESUME_TOOLS)
    (tmp_path / "tether_openai.py").write_text(ADAPTER)  # the runtime's test adapter: the raw openai SDK in a tool loop
    effects = tmp_path / "effects"
    with FakeProvider(RESUME_SCRIPT) as fake:
        sub = submission(tools=["lookup"], model={"name": "gpt-4o-mini", "baseURL": f"{fake.url}/openai/v1"})
        sub.request.tools = {"lookup": AgentToolSpec.model_validate({"description": "Look up", "implementation": "resume_tools:lookup"})}
        sub.store_url = f"s3://{backend.bucket}/tether/{NS}?endpoint_url={backend.s3}"
        ex = executor(backend)
        ex.tool_modules = ("resume_tools",)
        run(ex.submit(sub))
        seen: list[str] = []

        def new_pod() -> list[dict[str, Any]]:
            return [
                p
                for p in pods(backend)
                if p["metadata"].get("labels", {}).get("flyte.org/run") == sub.name and p["metadata"]["uid"] not in seen
            ]

        env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "EFFECTS": str(effects), "TETHER_PROGRESS": "1"}
        codes = []
        for kill in ("2", ""):  # killed after two steps (the turn, the tool call), then left alone
            pod = wait_for(new_pod, timeout=90, what="the run's pod")[0]
            seen.append(pod["metadata"]["uid"])
            codes.append(backend.play_kubelet(pod, {**env, "TETHER_KILL_AFTER_STEP": kill}))
        assert codes == [137, 0], codes

        def finished() -> Any:
            status = run(ex.status(sub.name))
            return status if status is not None and status.state.finished else None

        status = wait_for(finished, timeout=90, what="the run's outcome")
        live_turns = fake.live_calls()
    assert status.state is ExecutionState.SUCCEEDED, status
    assert status.attempts == 2, status
    assert effects.read_text() == "A1\n"  # the tool ran once
    assert live_turns == 2  # the first turn replayed, not asked again
    records = read_records(open_store(sub.store_url), sub.request.run_id)
    assert [(r.kind, r.attempt) for r in records] == [("model", 1), ("tool", 1), ("model", 2)], records


def test_the_resume_after_an_approval_is_a_new_segment_that_replays(backend: Backend, loop: Any, tmp_path: Any) -> None:
    """A tool that needs approval suspends the run: the task ends (nothing held while a human
    decides) and the run is Suspended. The decision's resume is a new Flyte run, the execution's
    second segment (`<name>-2`), whose pod replays the first turn from the journal, finds the
    decision, runs the tool once and finishes; the first segment's pod is not made again."""
    from tests.support.tool_runner_pod import ADAPTER
    from tether.api import AgentToolSpec
    from tether.approvals import decide, list_approvals
    from tether.journal import read_records
    from tether.stores import open_store
    from tether.testing import FakeProvider
    from tether_operator.executors.flyte import segment_name

    (tmp_path / "resume_tools.py").write_text(RESUME_TOOLS)
    (tmp_path / "tether_openai.py").write_text(ADAPTER)
    effects = tmp_path / "effects"
    with FakeProvider(RESUME_SCRIPT) as fake:
        sub = submission(tools=["lookup"], model={"name": "gpt-4o-mini", "baseURL": f"{fake.url}/openai/v1"})
        tool = {"description": "Look up", "implementation": "resume_tools:lookup", "approval": {"required": True}}
        sub.request.tools = {"lookup": AgentToolSpec.model_validate(tool)}
        sub.store_url = f"s3://{backend.bucket}/tether/{NS}?endpoint_url={backend.s3}"
        store = open_store(sub.store_url)
        ex = executor(backend)
        ex.tool_modules = ("resume_tools",)
        run(ex.submit(sub))
        env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "EFFECTS": str(effects)}
        seen: list[str] = []

        def pod_of(flyte_run: str) -> Callable[[], list[dict[str, Any]]]:
            return lambda: [
                p
                for p in pods(backend)
                if p["metadata"].get("labels", {}).get("flyte.org/run") == flyte_run and p["metadata"]["uid"] not in seen
            ]

        def state(wanted: ExecutionState) -> Callable[[], Any]:
            def check() -> Any:
                status = run(ex.status(sub.name))
                return status if status is not None and status.state is wanted else None

            return check

        first = wait_for(pod_of(sub.name), timeout=90, what="the first segment's pod")[0]
        seen.append(first["metadata"]["uid"])
        assert backend.play_kubelet(first, env) == 0  # the task ended: suspended is an outcome, not a failure
        wait_for(state(ExecutionState.SUSPENDED), timeout=90, what="the run suspended")
        assert not effects.exists()
        [request] = list_approvals(store, sub.request.run_id)
        decide(store, sub.request.run_id, request["id"], True, by="cfo")
        run(ex.resume(sub.name))
        second = wait_for(pod_of(segment_name(sub.name, 2)), timeout=90, what="the second segment's pod")[0]
        seen.append(second["metadata"]["uid"])
        assert backend.play_kubelet(second, env) == 0
        status = wait_for(state(ExecutionState.SUCCEEDED), timeout=90, what="the run's outcome")
        live_turns = fake.live_calls()
        assert not pod_of(sub.name)(), "the first segment's pod was made again"
    assert effects.read_text() == "A1\n"  # approved, run once
    assert live_turns == 2  # the first turn replayed in the second segment
    records = read_records(store, sub.request.run_id)
    assert [(r.kind, r.attempt) for r in records] == [("model", 1), ("tool", 2), ("model", 2)], records
    assert (status.url or "").endswith(f"/runs/{segment_name(sub.name, 2)}"), status  # the run now is its second segment
