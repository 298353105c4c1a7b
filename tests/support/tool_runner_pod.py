"""Two processes laid out as a runner pod of the Kubernetes executor lays them out: the agent
(``python -m tether exec``, its secrets directory holding the provider key only) and a tool runner
(``python -m tether tool-runner``, its own secrets directory holding the tool's Secret), over a
Unix socket. Used by tests/core/test_tool_runner.py and by the adapters' tests with a real
framework."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
WEATHER_KEY = "wk-live-7f3a9c2e51d04b8e-tool-only"
MODEL_KEY = "sk-model-key-5501-agent-only"
DIGEST = hashlib.sha256(WEATHER_KEY.encode()).hexdigest()[:12]

TOOLS = '''
import hashlib, json, os, time
import tether


def forecast(city: str) -> str:
    """The weather forecast for a city."""
    key = tether.secret("WEATHER_KEY")
    seen = {"city": city, "pid": os.getpid(), "idempotency_key": tether.idempotency_key(),
            "key_sha": key and hashlib.sha256(key.encode()).hexdigest()[:12], "environ": os.environ.get("WEATHER_KEY") == key}
    with open(os.environ["EFFECTS"], "a") as f:
        f.write(json.dumps(seen) + "\\n")
    if city == "Atlantis":
        raise LookupError("no such city: Atlantis")
    hold = os.environ.get("HOLD")
    if hold and not os.path.exists(hold + ".released"):  # the effect happened: wait to be cut off
        open(hold, "w").close()
        while not os.path.exists(hold + ".released"):
            time.sleep(0.02)
    return f"{city}: sunny"


def pause() -> str:
    """Wait a moment."""
    marker = os.environ.get("PAUSE")
    if marker:
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        while not os.path.exists(marker + ".released"):
            time.sleep(0.02)
    return "paused"
'''

# The core environment has no framework (no tether_openai): a module of that name on the path is
# the runtime's test adapter (the raw openai SDK in a small loop), handing a tool error to the
# model as text as every real adapter does.
ADAPTER = """
from tests.core.chat_adapter import ChatAdapter
from tether.agent import tool_error_text
from tether.errors import ToolError


class _ErrorsToModel:
    def __init__(self, tool):
        self.tool, self.name, self.fn, self.description = tool, tool.name, tool.fn, tool.description

    async def __call__(self, **kwargs):
        try:
            return await self.tool(**kwargs)
        except ToolError as e:
            return tool_error_text(e)


class Adapter(ChatAdapter):
    framework = "openai"

    def build(self, spec, session):
        spec.tools = [_ErrorsToModel(t) for t in spec.tools]
        return super().build(spec, session)


ADAPTER = Adapter()
"""

SCRIPT = {
    "conversations": [
        {
            "match": "weather:",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "forecast", "arguments": {"city": "Paris"}},
                        {"name": "forecast", "arguments": {"city": "Atlantis"}},
                    ]
                },
                {"tool_calls": [{"name": "pause", "arguments": {}}]},
                {"text_from_tool_results": True, "text": "Report:"},
            ],
        },
        {
            "match": "oslo:",
            "turns": [
                {"tool_calls": [{"name": "forecast", "arguments": {"city": "Oslo"}}]},
                {"text_from_tool_results": True, "text": "Oslo:"},
            ],
        },
    ]
}


class Pod:
    """The files of one runner pod, laid out as the Kubernetes executor mounts them."""

    def __init__(self, root: Path, fake_url: str, prompt: str, run_id: str = "run-1", *, test_adapter: bool = True) -> None:
        self.root = root
        (root / "mods").mkdir(parents=True, exist_ok=True)
        (root / "mods" / "weather_tools.py").write_text(TOOLS)
        if test_adapter:  # else the environment's own tether_openai
            (root / "mods" / "tether_openai.py").write_text(ADAPTER)
        self.agent_secrets, self.tool_secrets = root / "agent-secrets", root / "tool-secrets"
        (self.agent_secrets / "model").mkdir(parents=True, exist_ok=True)
        (self.agent_secrets / "model" / "apiKey").write_text(MODEL_KEY)
        (self.tool_secrets / "tools" / "forecast").mkdir(parents=True, exist_ok=True)
        (self.tool_secrets / "tools" / "forecast" / "WEATHER_KEY").write_text(WEATHER_KEY)
        self.socket = str(root / "sockets" / "0.sock")
        (root / "sockets").mkdir(exist_ok=True)
        self.effects = root / "effects.jsonl"
        self.store = root / "store"
        self.run_id = run_id
        tools = {
            "forecast": {
                "description": "The forecast",
                "implementation": "weather_tools:forecast",
                "env": [{"name": "WEATHER_KEY", "secretKeyRef": {"name": "weather", "key": "key"}}],
            },
            "pause": {"description": "Wait", "implementation": "weather_tools:pause"},
        }
        request = {
            "runId": run_id,
            "namespace": "ns",
            "name": run_id,
            "spec": {
                "framework": "openai",
                "model": {"name": "gpt-4o-mini", "baseURL": f"{fake_url}/openai/v1"},
                "input": prompt,
                "tools": list(tools),
            },
            "tools": tools,
        }
        self.request = root / "request.json"
        self.request.write_text(json.dumps(request))

    def env(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        path = os.pathsep.join([str(self.root / "mods"), str(REPO), *sys.path])
        return {**base, "PYTHONPATH": path, "TETHER_TOOL_MODULES": "weather_tools", "EFFECTS": str(self.effects), **extra}

    def runner(
        self, tool: str = "forecast", image: Path | None = None, *, port: int = 0, token_file: Path | None = None, **extra: str
    ) -> subprocess.Popen[str]:
        """The tool runner of ``tool``; ``image``: a directory of modules only its image has;
        ``port``: on TCP (a tool pod of its own), answering the token in ``token_file`` only."""
        argv = ["-m", "tether", "tool-runner", "--request", str(self.request), "--tool", tool]
        argv += ["--listen", f"127.0.0.1:{port}", "--token-file", str(token_file)] if port else ["--socket", self.socket]
        env = self.env(TETHER_SECRETS_DIR=str(self.tool_secrets), **extra)
        if image is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(image), env["PYTHONPATH"]])
        proc = subprocess.Popen([sys.executable, *argv], env=env, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while not (_listening(port) if port else os.path.exists(self.socket)):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.time() < deadline, "the tool runner did not start"
            time.sleep(0.05)
        return proc

    def agent(self, tool: str = "forecast", address: str = "", **extra: str) -> subprocess.Popen[str]:
        """``tether exec`` with ``tool`` in the runner (at ``address``, else the pod's socket)."""
        runners = json.dumps({tool: address or self.socket})
        env = self.env(TETHER_SECRETS_DIR=str(self.agent_secrets), TETHER_TOOL_RUNNERS=runners, **extra)
        argv = ["-m", "tether", "exec", str(self.request), "--store", str(self.store)]
        return subprocess.Popen([sys.executable, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=self.root)

    def seen(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.effects.read_text().splitlines()] if self.effects.exists() else []

    def store_bytes(self) -> bytes:
        return b"".join(p.read_bytes() for p in sorted(self.store.rglob("*")) if p.is_file())

    def tool_records(self) -> list[dict[str, Any]]:
        from tether.journal import Journal
        from tether.stores import open_store

        journal = Journal(open_store(str(self.store)), self.run_id).load()
        return [{"outcome": r.outcome, "body": json.loads(r.body)} for r in journal.records.values() if r.kind == "tool"]


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_image_only_embed(pod: Pod, image: Path) -> tuple[int, dict[str, Any], str]:
    """The pod's request names one tool, `embed` from `embed_tools` (a module only the tool's image
    at ``image`` has); its runner serves it while the agent runs: (exit code, outcome, stderr)."""
    request = json.loads(pod.request.read_text())
    request["spec"]["tools"] = ["embed"]
    request["tools"] = {
        "embed": {"description": "Embed a text", "implementation": "embed_tools:embed", "image": "registry.example/embed:1"}
    }
    pod.request.write_text(json.dumps(request))
    runner = pod.runner("embed", image=image, TETHER_TOOL_MODULES="embed_tools")
    try:
        return finish(pod.agent("embed", TETHER_TOOL_MODULES="embed_tools"))
    finally:
        stop(runner)


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, dict[str, Any], str]:
    out, err = proc.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return proc.returncode, (json.loads(lines[-1]) if lines else {}), err


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(10)


def wait_file(path: Path, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the agent ended early: {proc.communicate()}"
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def memory_holds(pid: int, needle: bytes) -> bool:
    """Whether any readable mapping of process ``pid`` contains ``needle`` (the parent may read
    its child's memory under Yama ptrace_scope 1)."""
    found = False
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("r"):
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                chunk = mem.read(end - start)
            except (OSError, OverflowError, ValueError):  # [vvar] and the like
                continue
            if needle in chunk:
                found = True
                break
    return found
