"""tether.api: manifests validate offline with clear errors; the CRDs never drift from the models."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether import api, contract
from tether_operator import crds

RUN = """
apiVersion: tether.dev/v1alpha1
kind: AgentRun
metadata: {name: demo, namespace: team-a}
spec:
  framework: openai
  model:
    name: gpt-4.1
    baseURL: http://127.0.0.1:8080/v1
    apiKeySecretRef: {name: openai, key: OPENAI_API_KEY}
  input: Refund order 42
  tools: [refund]
  memoryKey: customer-42
  resources: {cpu: 500m, memory: 1Gi, gpu: {type: A100, count: 1}}
  limits: {maxTurns: 10, maxCostUSD: 1.5}
"""

TOOL = """
apiVersion: tether.dev/v1alpha1
kind: AgentTool
metadata: {name: refund}
spec:
  description: Refund an order.
  implementation: shop.tools:refund
  approval: {required: true, prompt: "Refund {order}?", timeout: 24h}
  env:
  - name: SHOP_TOKEN
    secretKeyRef: {name: shop, key: token}
"""


def test_run_manifest_parses_with_defaults() -> None:
    m = api.load_manifest(RUN)
    assert isinstance(m, api.AgentRunManifest)
    assert m.spec.retries == 2 and m.spec.durable and m.spec.timeout_seconds == 3600
    wire = m.spec.wire()
    assert wire["memoryKey"] == "customer-42"
    assert wire["model"]["apiKeySecretRef"] == {"name": "openai", "key": "OPENAI_API_KEY"}
    assert wire["model"]["baseURL"].startswith("http://")
    assert wire["limits"]["maxCostUSD"] == 1.5


def test_tool_manifest_and_multi_document(tmp_path: Path) -> None:
    path = tmp_path / "both.yaml"
    path.write_text(RUN + "---\n" + TOOL)
    run, tool = api.load_manifests(path)
    assert isinstance(tool, api.AgentToolManifest)
    assert tool.spec.approval and tool.spec.approval.default_action == "decline"
    assert tool.spec.cache is None and tool.spec.effective_cache == "off"  # approval required: no cross-run cache
    with pytest.raises(api.ManifestError, match="expected one document"):
        api.load_manifest(str(path))


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("framework: openai", "framework: autogen"), "spec.framework"),
        (("gpu: {type: A100, count: 1}", "gpu: {count: 1}"), "gpu.type is required"),
        (("count: 1}", "count: -1}"), "spec.resources.gpu.count"),
        (("memory: 1Gi", "memory: 1 GB"), "spec.resources.memory"),
        (("memoryKey: customer-42", "memoryKey: customer-42\n  colour: blue"), "spec.colour"),
        (("kind: AgentRun", "kind: AgentRunner"), "kind must be AgentRun or AgentTool"),
        (("input: Refund order 42", "input: ''"), "spec.input"),
        (("baseURL: http://", "baseURL: ftp://"), "spec.model.baseURL"),
    ],
)
def test_invalid_run_is_rejected_with_the_field(change: tuple[str, str], expected: str) -> None:
    with pytest.raises(api.ManifestError, match=expected.replace(".", r"\.")):
        api.load_manifest(RUN.replace(*change))


def test_oversized_input_and_bad_yaml() -> None:
    big = RUN.replace("input: Refund order 42", "input: " + "x" * (api.MAX_INPUT + 1))
    with pytest.raises(api.ManifestError, match="spec.input"):
        api.load_manifest(big)
    with pytest.raises(api.ManifestError, match="not valid YAML"):
        api.load_manifest("spec: [unclosed\n  x: y")


def test_progress_tolerates_nulls_and_unknown_keys() -> None:
    p = contract.Progress.model_validate(
        {
            "phase": "running",
            "attempt": 2,
            "steps": None,
            "newThing": 1,
            "approvals": [{"id": "a1", "tool": "refund", "arguments": {"order": 42}}],
        }
    )
    assert p.steps.model_live == 0
    assert p.pending_approvals()[0].status().arguments == '{"order": 42}'


def test_crds_are_in_sync_with_the_models() -> None:
    assert crds.main(["--check"]) == 0, "run `tether crds` to regenerate crds/"


def test_check_fails_when_a_model_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert crds.main(["--out", str(tmp_path)]) == 0
    assert crds.main(["--check", "--out", str(tmp_path)]) == 0

    class Changed(api.AgentRunSpec):
        priority: int = 0

    monkeypatch.setattr(api, "AgentRunSpec", Changed)
    assert crds.main(["--check", "--out", str(tmp_path)]) == 1


def _walk(node: dict, path: str) -> None:
    assert "$ref" not in node and "anyOf" not in node and "title" not in node, path
    assert "type" in node, path
    for key, child in node.get("properties", {}).items():
        assert child.get("description"), f"{path}.{key} has no description (kubectl explain)"
        _walk(child, f"{path}.{key}")
    if "items" in node:
        _walk(node["items"], path + "[]")


def test_crd_schema_is_structural_and_documented() -> None:
    for model in (api.AgentRunSpec, api.AgentRunStatus, api.AgentToolSpec, api.AgentToolStatus):
        _walk(crds.schema_of(model), model.__name__)


def test_framework_enum_lists_exactly_the_adapters() -> None:
    # The API promises only what runs: `framework:` accepts an id iff adapters/<id> exists.
    adapters = {d.name for d in (Path(__file__).resolve().parents[2] / "adapters").iterdir() if (d / "pyproject.toml").is_file()}
    assert {f.value for f in api.Framework} == adapters


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("input: Refund order 42", "input: '   '"), "spec.input: must not be blank"),
        (("memoryKey: customer-42", "memoryKey: customer-42\n  instructions: ' '"), "spec.instructions: must not be blank"),
        (("memoryKey: customer-42", "memoryKey: customer-42\n  timeout: 0s"), "spec.timeout: must be a duration longer than zero"),
        (("memoryKey: customer-42", "memoryKey: customer-42\n  retries: '2'"), "spec.retries: Input should be a valid integer"),
        (("memoryKey: customer-42", "memoryKey: customer-42\n  durable: 'yes'"), "spec.durable: Input should be a valid boolean"),
        (("baseURL: http://", "baseURL: https://u:p@"), "spec.model.baseURL: must not carry credentials"),
        (("name: demo,", "name: " + "d" * 64 + ","), "metadata.name: String should have at most 63 characters"),
    ],
)
def test_runtime_says_what_the_apiserver_says(change: tuple[str, str], expected: str) -> None:
    with pytest.raises(api.ManifestError) as caught:
        api.load_manifest(RUN.replace(*change))
    assert expected in str(caught.value)
    assert "Value error," not in str(caught.value)


def test_duplicate_env_names_are_refused() -> None:
    doubled = TOOL + "  - name: SHOP_TOKEN\n    secretKeyRef: {name: other, key: token}\n"
    with pytest.raises(api.ManifestError, match="spec.env: duplicate env names: SHOP_TOKEN"):
        api.load_manifest(doubled)


def test_read_spec_names_fields_without_a_pydantic_dump() -> None:
    with pytest.raises(api.ManifestError) as caught:
        api.read_spec(api.AgentRunSpec, {"framework": "no-such-framework", "model": {"name": " "}, "input": ""})
    text = str(caught.value)
    *others, last = (f"'{f.value}'" for f in api.Framework)
    assert f"spec.framework: Input should be {', '.join(others)} or {last}" in text
    assert "spec.model.name: must not be blank" in text and "spec.input: String should have at least 1 character" in text
    assert "errors.pydantic.dev" not in text and "type=" not in text and "\n" not in text
