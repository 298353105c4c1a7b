"""Each tool sees only its own Secret env, at call time; the agent sees only its provider key;
tool implementations come only from allowed modules (tether.secrets, tether.tools).

In process: concurrent calls of two tools (one async, one sync in a worker thread) each read
their own secret through ``tether.secret`` and ``os.environ`` and never the other's; the code
around them (the agent's) sees neither. Through ``python -m tether exec``: ``$TETHER_SECRETS`` and
``$TETHER_SECRETS_DIR`` are read and the former is gone before any tool module is imported; a
standard-library or unlisted implementation is a terminal error naming the tool.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import tether
from tether import secrets as S
from tether.api import AgentToolSpec
from tether.contract import ExecRequest
from tether.entrypoint import EXIT_TERMINAL, tool_from_spec
from tether.errors import ConfigError
from tether.progress import read_progress
from tether.run import Run
from tether.stores import open_store
from tether.tools import ToolSpec, call_tool

A_VALUE, B_VALUE, MODEL_KEY = "tool-a-secret-0451", "tool-b-secret-7319", "sk-model-key-2207"


@pytest.fixture
def scoped_environ():
    original = os.environ
    S.install_scoped_environ()
    yield
    os.environ = original  # noqa: B003 (the view shares its data: nothing to copy back)


def test_load_from_env_removes_it_and_from_a_directory(tmp_path: Path) -> None:
    env = {S.SECRETS_ENV: json.dumps({"model": {"apiKey": MODEL_KEY}, "tools": {"a": {"A_TOKEN": A_VALUE}}}), "PATH": "/bin"}
    loaded = S.load(env)
    assert S.SECRETS_ENV not in env and env == {"PATH": "/bin"}
    assert loaded.model_key == MODEL_KEY and loaded.tools == {"a": {"A_TOKEN": A_VALUE}}
    assert MODEL_KEY not in repr(loaded) and A_VALUE not in repr(loaded)

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "apiKey").write_text(MODEL_KEY)
    for tool, name, value in (("a", "A_TOKEN", A_VALUE), ("b", "B_TOKEN", B_VALUE)):
        (tmp_path / "tools" / tool).mkdir(parents=True)
        (tmp_path / "tools" / tool / name).write_text(value)
    (tmp_path / "tools" / "a" / "..data").mkdir()  # what a projected volume keeps beside the files
    loaded = S.load({S.SECRETS_DIR_ENV: str(tmp_path)})
    assert loaded.model_key == MODEL_KEY and loaded.tools == {"a": {"A_TOKEN": A_VALUE}, "b": {"B_TOKEN": B_VALUE}}


def test_load_from_variables_a_flyte_run_was_given() -> None:
    """The Flyte executor asks Flyte to inject each Secret key as a variable and names them in
    $TETHER_SECRETS_FROM_ENV; load() reads them by path and removes all of them."""
    names = {"model/apiKey": "TETHER_SECRET_0", "tools/a/A_TOKEN": "TETHER_SECRET_1"}
    env = {S.SECRETS_FROM_ENV: json.dumps(names), "TETHER_SECRET_0": MODEL_KEY, "TETHER_SECRET_1": A_VALUE, "PATH": "/bin"}
    loaded = S.load(env)
    assert env == {"PATH": "/bin"}
    assert loaded.model_key == MODEL_KEY and loaded.tools == {"a": {"A_TOKEN": A_VALUE}}
    with pytest.raises(S.SecretsError, match="TETHER_SECRET_0 is not set"):
        S.load({S.SECRETS_FROM_ENV: json.dumps(names)})


def test_malformed_secrets_are_refused_without_echoing_them() -> None:
    with pytest.raises(S.SecretsError) as e:
        S.load({S.SECRETS_ENV: "{not json " + A_VALUE})
    assert A_VALUE not in str(e.value)


def test_each_tool_sees_only_its_own_secrets(scoped_environ, tmp_path: Path) -> None:
    seen: dict[str, dict[str, object]] = {}
    both_inside = threading.Barrier(2, timeout=10)  # the two calls overlap in time

    def look(who: str) -> None:
        seen[who] = {
            "secret": {n: tether.secret(n) for n in ("A_TOKEN", "B_TOKEN")},
            "environ": {n: os.environ.get(n) for n in ("A_TOKEN", "B_TOKEN")},
            "getenv": {n: os.getenv(n) for n in ("A_TOKEN", "B_TOKEN")},
            "listed": sorted(n for n in dict(os.environ) if n in ("A_TOKEN", "B_TOKEN")),
        }

    async def tool_a() -> str:
        await asyncio.to_thread(both_inside.wait)
        look("a")
        return "a"

    def tool_b() -> str:  # sync: runs in a worker thread
        both_inside.wait()
        look("b")
        return "b"

    async def agent() -> None:
        run = Run("secrets-isolation", str(tmp_path / "store"))
        a = ToolSpec("a", tool_a, secrets={"A_TOKEN": A_VALUE})
        b = ToolSpec("b", tool_b, secrets={"B_TOKEN": B_VALUE})
        assert await asyncio.gather(call_tool(a, {}, run=run), call_tool(b, {}, run=run)) == ["a", "b"]
        look("agent")
        await run.aclose()

    asyncio.run(agent())
    assert seen["a"]["secret"] == seen["a"]["environ"] == seen["a"]["getenv"] == {"A_TOKEN": A_VALUE, "B_TOKEN": None}
    assert seen["b"]["secret"] == seen["b"]["environ"] == seen["b"]["getenv"] == {"A_TOKEN": None, "B_TOKEN": B_VALUE}
    assert seen["a"]["listed"] == ["A_TOKEN"] and seen["b"]["listed"] == ["B_TOKEN"]
    nothing = {"A_TOKEN": None, "B_TOKEN": None}
    assert seen["agent"]["secret"] == seen["agent"]["environ"] == seen["agent"]["getenv"] == nothing
    assert seen["agent"]["listed"] == [] and A_VALUE not in repr(os.environ)


@pytest.mark.parametrize("implementation", ["subprocess:getoutput", "os:system", "builtins:eval", "shutil:rmtree"])
def test_the_standard_library_is_never_a_tool(implementation: str) -> None:
    spec = AgentToolSpec(description="d", implementation=implementation)
    with pytest.raises(ConfigError, match=f"AgentTool shell: {implementation} is in the Python standard library"):
        tool_from_spec("shell", spec, allowed=("subprocess", "os", "builtins", "shutil"))  # even when listed


def test_only_allowed_modules_are_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text("")
    (tmp_path / "shop" / "tools.py").write_text("def lookup(order: str) -> str:\n    return order\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = AgentToolSpec(description="d", implementation="shop.tools:lookup")
    assert tool_from_spec("lookup", spec, allowed=("shop",)).name == "lookup"
    assert tool_from_spec("lookup", spec, allowed=("shop.tools",)).name == "lookup"
    with pytest.raises(ConfigError, match="AgentTool lookup: module shop.tools is not an allowed tool module"):
        tool_from_spec("lookup", spec, allowed=("shopping",))
    monkeypatch.setenv("TETHER_TOOL_MODULES", "other")
    with pytest.raises(ConfigError, match=r"allowed: other; chart value tools.allowedModules"):
        tool_from_spec("lookup", spec)


# A tool module that records, when imported, what the process environment holds.
SPY = """
import json, os
from tether import secrets
json.dump({"env": dict(os.environ), "held": dict(secrets.tool_secrets("spy"))}, open(os.environ["SPY_OUT"], "w"))

def look() -> str:
    return "x"
"""


def _exec(tmp_path: Path, tools: dict[str, str], env: dict[str, str], agent: str | None = None) -> subprocess.CompletedProcess[str]:
    spec = {"framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hi", "tools": list(tools), "agent": agent}
    request = ExecRequest.model_validate(
        {
            "runId": "r1",
            "namespace": "ns",
            "name": "r1",
            "spec": {k: v for k, v in spec.items() if v is not None},
            "tools": {name: {"description": "d", "implementation": impl} for name, impl in tools.items()},
        }
    )
    (tmp_path / "request.json").write_text(request.model_dump_json(by_alias=True))
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    return subprocess.run(
        [sys.executable, "-m", "tether", "exec", str(tmp_path / "request.json"), "--store", str(tmp_path / "store")],
        env={**base, "PYTHONPATH": os.pathsep.join([str(tmp_path / "mods"), *sys.path]), **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


@pytest.mark.parametrize("source", ["env", "dir"])
def test_exec_reads_secrets_before_importing_tools(tmp_path: Path, source: str) -> None:
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "spy_tools.py").write_text(SPY)
    env = {"SPY_OUT": str(tmp_path / "seen.json"), "TETHER_TOOL_MODULES": "spy_tools"}
    if source == "env":
        env[S.SECRETS_ENV] = json.dumps({"model": {"apiKey": MODEL_KEY}, "tools": {"spy": {"A_TOKEN": A_VALUE}, "b": {"B_TOKEN": B_VALUE}}})
    else:
        (tmp_path / "s" / "model").mkdir(parents=True)
        (tmp_path / "s" / "model" / "apiKey").write_text(MODEL_KEY)
        (tmp_path / "s" / "tools" / "spy").mkdir(parents=True)
        (tmp_path / "s" / "tools" / "spy" / "A_TOKEN").write_text(A_VALUE)
        env[S.SECRETS_DIR_ENV] = str(tmp_path / "s")
    proc = _exec(tmp_path, {"spy": "spy_tools:look"}, env)
    # No adapter in this environment: the attempt ends terminally after the tools were built.
    assert proc.returncode == EXIT_TERMINAL and "no adapter for framework" in proc.stderr, proc.stderr
    spied = json.loads((tmp_path / "seen.json").read_text())
    assert spied["held"] == {"A_TOKEN": A_VALUE}  # held for the spy tool's calls, in the process tools run in
    seen = spied["env"]
    assert S.SECRETS_ENV not in seen
    assert seen["OPENAI_API_KEY"] == MODEL_KEY  # the agent's own key, where its SDK reads it
    text = json.dumps(seen)
    assert A_VALUE not in text and B_VALUE not in text  # tools' secrets never in the environment


@pytest.mark.parametrize("implementation", ["subprocess:getoutput", "os:system", "builtins:eval", "spy_tools:look"])
def test_exec_refuses_a_tool_from_a_module_not_allowed(tmp_path: Path, implementation: str) -> None:
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "spy_tools.py").write_text(SPY)
    proc = _exec(tmp_path, {"shell": implementation}, {"SPY_OUT": str(tmp_path / "seen.json"), "TETHER_TOOL_MODULES": "other"})
    assert proc.returncode == EXIT_TERMINAL
    assert "ConfigError: AgentTool shell: " in proc.stderr and ("standard library" in proc.stderr or "not an allowed" in proc.stderr)
    assert not (tmp_path / "seen.json").exists()  # the module was never imported
    progress = read_progress(open_store(str(tmp_path / "store")), "r1")  # where the operator reads the reason
    assert progress is not None and progress["phase"] == "Failed" and "AgentTool shell: " in progress["error"]


# A bring-your-own agent module that records, when imported, that it was.
SPY_AGENT = """
import json, os
json.dump({"imported": True}, open(os.environ["SPY_OUT"], "w"))
agent = object()
"""


@pytest.mark.parametrize(
    ("agent", "allowed", "refusal"),
    [
        ("os:system", "os", "spec.agent: os:system is in the Python standard library, which never provides agents"),
        ("subprocess:getoutput", "", "spec.agent: subprocess:getoutput is in the Python standard library"),
        ("spy_agents:agent", "other", "spec.agent: module spy_agents is not an allowed agent module (allowed: other; chart value agents.allowedModules)"),
        ("spy_agents:agent", "", "spec.agent: module spy_agents is not an allowed agent module (allowed: none;"),
    ],
)  # fmt: skip
def test_exec_refuses_an_agent_from_a_module_not_allowed(tmp_path: Path, agent: str, allowed: str, refusal: str) -> None:
    """`spec.agent` goes through its own allowlist ($TETHER_AGENT_MODULES, the chart's
    agents.allowedModules; else the image's `tether.agents` entry points), never the standard
    library: refused at start, exit 2, before any framework or agent module loads."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "spy_agents.py").write_text(SPY_AGENT)
    env = {"SPY_OUT": str(tmp_path / "seen.json")} | ({"TETHER_AGENT_MODULES": allowed} if allowed else {})
    proc = _exec(tmp_path, {}, env, agent=agent)
    assert proc.returncode == EXIT_TERMINAL and f"ConfigError: {refusal}" in proc.stderr, proc.stderr
    assert not (tmp_path / "seen.json").exists()  # the module was never imported
    progress = read_progress(open_store(str(tmp_path / "store")), "r1")
    assert progress is not None and progress["phase"] == "Failed" and refusal in progress["error"]


def test_exec_lets_an_allowed_agent_module_through(tmp_path: Path) -> None:
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "spy_agents.py").write_text(SPY_AGENT)
    proc = _exec(tmp_path, {}, {"SPY_OUT": str(tmp_path / "seen.json"), "TETHER_AGENT_MODULES": "spy_agents"}, agent="spy_agents:agent")
    # Past the allowlist: no adapter in this environment, so the attempt ends there.
    assert proc.returncode == EXIT_TERMINAL and "no adapter for framework" in proc.stderr, proc.stderr
    assert "not an allowed agent module" not in proc.stderr
