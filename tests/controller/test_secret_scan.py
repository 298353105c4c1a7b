"""The secret scan (self-contained: its own runs). Known secret values are planted — the provider
key, a tool's Secret env, the store's credentials — and three kinds of run use them against the
fake provider: an AgentRun through the operator on the real apiserver (local executor, S3 store),
`tether run` (the CLI, S3 store) and `run_agent` (the Python API, local store). Then every stored
byte (S3 bucket, local store, the executor's work dir: request files and runtime logs), every
AgentRun/AgentTool status and Event, the operator's log and the CLI's and API's output are
searched for each value. The provider saw the key (so the planted values were really in use).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.core.test_secrets import SeeingProvider
from tests.support.kube import ControlPlane
from tests.support.s3 import new_bucket, read_all_bytes

from .conftest import SERVED, Operator, Release
from .test_e2e_openai import EXAMPLES, _agent_python

pytestmark = pytest.mark.kube

NS = SERVED[1]
PLANTED = {
    "provider key": "sk-planted-provider-key-6c1f2e",
    "tool secret": "planted-tool-token-91d0aa",
    "store key id": "AKIAPLANTED7Q2Z",
    "store secret key": "planted-store-secret-4b7e19",
}
STORE_ENV = {
    "AWS_ACCESS_KEY_ID": PLANTED["store key id"],
    "AWS_SECRET_ACCESS_KEY": PLANTED["store secret key"],
    "AWS_DEFAULT_REGION": "us-east-1",
}
QUESTION = "What is the weather in Paris today?"


@pytest.fixture(scope="module")
def provider() -> Iterator[SeeingProvider]:
    script = yaml.safe_load((EXAMPLES / "weather.script.yaml").read_text())
    with SeeingProvider(script) as p:
        yield p


def _docs(base_url: str) -> list[dict]:
    return [
        {
            "apiVersion": "tether.dev/v1alpha1",
            "kind": "AgentRun",
            "metadata": {"name": "scan"},
            "spec": {
                "framework": "openai",
                "model": {"name": "gpt-4o-mini", "baseURL": base_url, "apiKeySecretRef": {"name": "scan-llm", "key": "api-key"}},
                "instructions": "You answer questions about the weather. Use the get_weather tool.",
                "input": QUESTION,
                "tools": ["get-weather"],
                "retries": 0,
            },
        },
        {
            "apiVersion": "tether.dev/v1alpha1",
            "kind": "AgentTool",
            "metadata": {"name": "get-weather"},
            "spec": {
                "description": "Current weather in a city.",
                "implementation": "example_tools:get_weather",
                "env": [{"name": "WEATHER_TOKEN", "secretKeyRef": {"name": "scan-tool", "key": "token"}}],
            },
        },
    ]


def _operator_run(kube: ControlPlane, kubeconfig: Path, workdir: Path, store_url: str, provider: SeeingProvider) -> str:
    for name, key, value in (("scan-llm", "api-key", PLANTED["provider key"]), ("scan-tool", "token", PLANTED["tool secret"])):
        kube.kubectl("create", "secret", "generic", name, "-n", NS, f"--from-literal={key}={value}")
        kube.kubectl("label", "secret", name, "-n", NS, "tether.dev/usable=true")
    op = Operator(
        kubeconfig,
        workdir,
        (NS,),
        TETHER_STORE_URL=store_url,
        TETHER_EXEC_PYTHON=_agent_python(),
        PYTHONPATH=str(EXAMPLES),
        TETHER_TOOL_MODULES="example_tools",
        OPENAI_AGENTS_DISABLE_TRACING="1",
        **STORE_ENV,
    )
    op.start()
    try:
        # AgentTools are immutable: an earlier test's get-weather in this namespace is replaced, not edited.
        kube.kubectl("delete", "agenttool", "get-weather", "-n", NS, "--ignore-not-found")
        kube.kubectl("apply", "-n", NS, "-f", "-", input="\n---\n".join(json.dumps(d) for d in _docs(provider.base_url("openai"))))
        done = kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=180s", "agentrun/scan", check=False, timeout=200)
        assert done.returncode == 0, kube.kubectl("get", "agentrun", "scan", "-n", NS, "-o", "json").stdout + op.logs()[-3000:]
    finally:
        op.stop()
    text = kube.kubectl("get", "agentruns,agenttools,events", "-n", NS, "-o", "json").stdout
    return text + op.logs()


def _cli_run(tmp: Path, store_url: str, provider: SeeingProvider) -> str:
    docs = _docs(provider.base_url("openai"))
    manifest = tmp / "scan.yaml"
    manifest.write_text("\n---\n".join(yaml.safe_dump(d) for d in docs))
    env = {
        **os.environ,
        **STORE_ENV,
        "OPENAI_API_KEY": PLANTED["provider key"],
        "PYTHONPATH": str(EXAMPLES),
        "TETHER_TOOL_MODULES": "example_tools",
    }
    proc = subprocess.run(
        [_agent_python(), "-m", "tether", "run", str(manifest), "--store", store_url], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and "sunny" in proc.stdout, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


API_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from example_tools import get_weather
    from tether_openai import run_agent, tool

    result = asyncio.run(run_agent(sys.argv[3], tools=[tool(get_weather, name="get-weather")], model="gpt-4o-mini",
                                   store=sys.argv[1], run_id="scan-api", upstreams={"openai": sys.argv[2]}))
    print(result.output, result.model_live)
    """
)


def _api_run(tmp: Path, store_url: str, provider: SeeingProvider) -> str:
    env = {**os.environ, "OPENAI_API_KEY": PLANTED["provider key"], "PYTHONPATH": str(EXAMPLES), "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    upstream = provider.base_url("openai").removesuffix("/v1")
    proc = subprocess.run(
        [_agent_python(), "-c", API_SCRIPT, store_url, upstream, QUESTION], env=env, capture_output=True, text=True, timeout=300, cwd=tmp
    )
    assert proc.returncode == 0 and "sunny" in proc.stdout, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_no_planted_secret_is_stored_reported_or_logged(
    kube: ControlPlane, tether_release: Release, operator_kubeconfig: Path, s3_endpoint: str, provider: SeeingProvider, tmp_path: Path
) -> None:
    bucket = new_bucket(s3_endpoint)
    op_store, cli_store = (f"s3://{bucket}/{p}?endpoint_url={s3_endpoint}" for p in ("operator", "cli"))
    api_store = tmp_path / "api-store"
    texts = {
        "operator: AgentRun/AgentTool status, Events, operator log": _operator_run(
            kube, operator_kubeconfig, tmp_path / "op", op_store, provider
        ),
        "CLI report": _cli_run(tmp_path, cli_store, provider),
        "run_agent output": _api_run(tmp_path, str(api_store), provider),
    }
    stored = {
        "S3 bucket (operator)": read_all_bytes(op_store),
        "S3 bucket (CLI)": read_all_bytes(cli_store),
        "local store (run_agent)": read_all_bytes(str(api_store)),
        "executor work dir (requests, runtime logs)": read_all_bytes(str(tmp_path / "op" / "executions")),
    }
    for where, data in stored.items():
        assert b"Paris" in data, f"{where}: nothing recorded, the scan would prove nothing"
    assert len(provider.credentials) >= 6, "three runs of two turns each"
    assert {c.get("Authorization") for c in provider.credentials} == {f"Bearer {PLANTED['provider key']}"}, "the key was not in use"

    found = [(what, where) for what, value in PLANTED.items() for where, text in texts.items() if value in text]
    found += [(what, where) for what, value in PLANTED.items() for where, data in stored.items() if value.encode() in data]
    assert not found, f"planted secrets found: {found}"
