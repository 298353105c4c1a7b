"""The chart's ``helm test`` (charts/tether/templates/tests/): the weather example, end to end, on
the cluster the chart was installed in, against the fake provider.

    python -m tether.testing.helm_test provider --tool NAME [--port 8080]
        the fake provider (a sidecar of the test pod) answering the weather example: a call of
        the AgentTool NAME, then the answer with the tool's result
    python -m tether.testing.helm_test run --namespace NS --name RUN --tool NAME --framework FW
                                           --base-url URL --key-secret SECRET [--timeout S]
        creates the AgentRun RUN (replacing one left by an earlier test), waits until it is
        Succeeded with the tool's answer in its output, deletes it; exit 1 naming what went wrong

It talks to the apiserver with the pod's ServiceAccount token (the chart's test Role: AgentRuns
in NS, and `use` of the key Secret) and the standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from .weather import get_weather

#: What each framework's weather example runs on (examples/<framework>/weather.yaml): provider, model.
MODELS = {
    "claude": ("anthropic", "claude-sonnet-4-5"),
    "google-adk": ("gemini", "gemini-2.5-flash"),
    "mistral": ("mistral", "mistral-small-latest"),
}
DEFAULT_MODEL = ("openai", "gpt-4o-mini")
INSTRUCTIONS = "You answer questions about the weather. Use the get_weather tool."
INPUT = "What is the weather in Paris today?"
#: The run's output holds the tool's result (the fake provider echoes it): the tool ran in the cluster.
EXPECTED = get_weather("Paris")

SA = "/var/run/secrets/kubernetes.io/serviceaccount"


def script(tool: str) -> dict[str, Any]:
    """The weather example's fake-provider script (examples/openai/weather.script.yaml) for the tool ``tool``."""
    return {
        "conversations": [
            {
                "match": "",
                "turns": [
                    {"tool_calls": [{"name": tool, "arguments": {"city": "Paris"}}]},
                    {"text_from_tool_results": True, "text": "Here is the weather in Paris:"},
                ],
            }
        ]
    }


def agent_run(args: argparse.Namespace) -> dict[str, Any]:
    from .fake_provider import BASE_PATHS

    provider, model = MODELS.get(args.framework, DEFAULT_MODEL)
    return {
        "apiVersion": "tether.dev/v1alpha1",
        "kind": "AgentRun",
        "metadata": {"name": args.name, "namespace": args.namespace, "labels": {"tether.dev/helm-test": "true"}},
        "spec": {
            "framework": args.framework,
            "model": {
                "name": model,
                "provider": provider,
                "baseURL": args.base_url.rstrip("/") + BASE_PATHS[provider],
                "apiKeySecretRef": {"name": args.key_secret, "key": "api-key"},
            },
            "instructions": INSTRUCTIONS,
            "input": INPUT,
            "tools": [args.tool],
        },
    }


class Api:
    """The apiserver, as the pod's ServiceAccount (in-cluster: KUBERNETES_SERVICE_HOST/PORT)."""

    def __init__(self, token_file: str, ca_file: str) -> None:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self.base = f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}"
        self.token_file = token_file
        self.tls = ssl.create_default_context(cafile=ca_file)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        with open(self.token_file) as f:
            token = f.read().strip()
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.tls, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                return e.code, json.loads(text)
            except ValueError:
                return e.code, {"message": text}


def run(args: argparse.Namespace) -> int:
    api = Api(args.token_file, args.ca_file)
    runs = f"/apis/tether.dev/v1alpha1/namespaces/{args.namespace}/agentruns"
    gone_by = time.monotonic() + 120
    while True:  # an earlier test's run (kept when it failed, for a look) is replaced
        code, _ = api.call("DELETE", f"{runs}/{args.name}")
        if code == 404 or api.call("GET", f"{runs}/{args.name}")[0] == 404:
            break
        if time.monotonic() > gone_by:
            return fail(f"the AgentRun {args.namespace}/{args.name} of an earlier test is still there after 120 s")
        time.sleep(1)
    code, body = api.call("POST", runs, agent_run(args))
    if code != 201:
        return fail(f"creating the AgentRun {args.namespace}/{args.name} was refused ({code}): {body.get('message', body)}")
    print(f"created AgentRun {args.namespace}/{args.name} ({args.framework}, tool {args.tool}, provider {args.base_url})", flush=True)
    deadline, last = time.monotonic() + args.timeout, ""
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        code, obj = api.call("GET", f"{runs}/{args.name}")
        if code != 200:
            return fail(f"reading the AgentRun failed ({code}): {obj.get('message', obj)}")
        status = obj.get("status") or {}
        phase = status.get("phase") or "-"
        if phase != last:
            print(f"phase {phase}", flush=True)
            last = phase
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(args.interval)
    else:
        return fail(f"the AgentRun did not finish in {args.timeout:g} s (phase {last}; conditions {_conditions(status)})")
    output = (status.get("result") or {}).get("output") or ""
    if status.get("phase") != "Succeeded":
        return fail(f"the AgentRun failed: {_conditions(status)}")
    if EXPECTED not in output:
        return fail(f"the AgentRun succeeded without the tool's answer {EXPECTED!r} in its output: {output!r}")
    print(f"Succeeded: {output}", flush=True)
    api.call("DELETE", f"{runs}/{args.name}")
    return 0


def _conditions(status: dict[str, Any]) -> str:
    found = [f"{c.get('type')}={c.get('status')} {c.get('reason') or ''}: {c.get('message') or ''}" for c in status.get("conditions") or []]
    return "; ".join(found) or "none"


def fail(message: str) -> int:
    print(f"helm test failed: {message}", file=sys.stderr, flush=True)
    return 1


def provider(args: argparse.Namespace) -> int:
    from .fake_provider import main as serve

    path = os.path.join(args.workdir, "weather.script.json")
    with open(path, "w") as f:
        json.dump(script(args.tool), f)
    return serve(["--script", path, "--host", "0.0.0.0", "--port", str(args.port)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tether.testing.helm_test", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("provider", help="serve the weather example's fake provider")
    s.add_argument("--tool", required=True, help="the AgentTool the script calls")
    s.add_argument("--port", type=int, default=8080)
    s.add_argument("--workdir", default="/tmp", help="where the script is written")
    r = sub.add_parser("run", help="run the weather example as an AgentRun and check its output")
    r.add_argument("--namespace", required=True)
    r.add_argument("--name", required=True, help="the AgentRun's name")
    r.add_argument("--tool", required=True, help="the AgentTool (implementation tether.testing.weather:get_weather)")
    r.add_argument("--framework", default="openai", help="the runtime image's framework")
    r.add_argument("--base-url", required=True, help="the fake provider, e.g. http://tether-test-provider.ns.svc:8080")
    r.add_argument("--key-secret", required=True, help="the Secret holding the (fake) provider key, key api-key")
    r.add_argument("--timeout", type=float, default=300)
    r.add_argument("--interval", type=float, default=2)
    r.add_argument("--token-file", default=f"{SA}/token")
    r.add_argument("--ca-file", default=f"{SA}/ca.crt")
    args = p.parse_args(argv)
    return provider(args) if args.command == "provider" else run(args)


if __name__ == "__main__":
    sys.exit(main())
