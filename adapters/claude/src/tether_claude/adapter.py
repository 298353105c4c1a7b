"""The Claude Agent SDK adapter: the SDK's own ``query()`` over its bundled CLI, every model request
in the wire seam through the loopback proxy.

The SDK drives a CLI subprocess Tether cannot hand an HTTP client, so the CLI is pointed at the
run's loopback proxy (``ANTHROPIC_BASE_URL``): each model turn, the main agent's and every
subagent's, is recorded and replayed per turn. Per attempt:

    HOME        a throwaway directory (the CLI's config, device id and session files), removed after;
                one a killed attempt left behind is removed by the next attempt (``reap_homes``)
    CLI         dies with the agent process (``PR_SET_PDEATHSIG``, ``reaped_cli``): a killed agent
                leaves no CLI reconnecting to its dead proxy and holding its stderr
    cwd         fixed across attempts: the options' own ``cwd``, else a directory named after the run
    offline     the CLI's telemetry, auto-updater and other non-essential traffic are off (OFFLINE_ENV)
    settings    no user/project settings files are read (``setting_sources=[]``) unless the user's
                own options name some

Tools: each Tether tool is a tool of an in-process MCP server (``create_sdk_mcp_server``) named
``tether``, so the model sees ``mcp__tether__<name>`` and every call goes through the tool seam
(journaled, never re-run after a kill). The CLI's built-in tools (Bash, Write, Read, …) are off
(``tools=[]``): only a bring-your-own ``ClaudeAgentOptions`` that sets ``tools`` itself turns any on,
and those run unjournaled (the CLI runs them, not Tether).

Memory: the CLI's session transcript (``~/.claude/projects/<cwd>/<session>.jsonl``) is the SDK's own
notion; its lines are the memory items, written back into the new HOME and resumed next run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import inspect
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, SdkMcpTool, create_sdk_mcp_server, query
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport
from pydantic import BaseModel, create_model

from tether.agent import Adapter, AgentSession, AgentSpec, Tool, tool_error_text
from tether.errors import Suspended, ToolError
from tether.run import current_run

from . import normalise  # noqa: F401 - registers the CLI's normaliser with the runtime's Anthropic protocol

#: The MCP server Tether tools are served from; the CLI names them ``mcp__tether__<tool>``.
SERVER = "tether"

#: Environment the CLI honours to stay offline: no telemetry, error reporting, auto-update or
#: other non-essential calls (the last one switches the first three off too).
OFFLINE_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1",
}
#: Subagents run in the foreground: a background agent would still be working (and calling the
#: model) when the run has ended and its memory been committed.
FOREGROUND_ENV = {"CLAUDE_CODE_DISABLE_BACKGROUND_TASKS": "1"}


def tool_name(t: Tool) -> str:
    """The name the model sees for a Tether tool."""
    return f"mcp__{SERVER}__{t.name}"


def input_schema(t: Tool) -> dict[str, Any]:
    """JSON schema of the tool's own signature (what the model must send)."""
    fields: dict[str, Any] = {}
    for name, p in inspect.signature(t.fn).parameters.items():
        annotation = Any if p.annotation is inspect.Parameter.empty else p.annotation
        fields[name] = (annotation, ... if p.default is inspect.Parameter.empty else p.default)
    model: type[BaseModel] = create_model(f"{t.name}_input", **fields)
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


class _Stop:
    """What ends an attempt early: a tool waiting for a human's approval."""

    def __init__(self) -> None:
        self.suspended: Suspended | None = None
        self.event = asyncio.Event()


def mcp_tool(t: Tool, stop: _Stop | None = None) -> SdkMcpTool[Any]:
    """A Tether tool as an SDK MCP tool whose calls go through the tool seam."""

    async def handler(args: dict[str, Any]) -> dict[str, Any]:
        if (run := current_run()) is not None:
            # The CLI starts a tool when its tool-use block has streamed, before the turn ends:
            # wait until that turn is recorded, so a crash in between never runs the tool twice.
            await run.seam.recorded()
        try:
            result = await t(**args)
        except ToolError as e:
            return {"content": [{"type": "text", "text": tool_error_text(e)}], "is_error": True}
        except Suspended as s:
            if stop is None:
                raise
            # Pending approval: end the attempt here, before the CLI asks the model again.
            stop.suspended = s
            stop.event.set()
            await asyncio.Event().wait()  # never answers: the query is cancelled
            raise
        text = result if isinstance(result, str) else json.dumps(result, default=str)
        return {"content": [{"type": "text", "text": text}]}

    return SdkMcpTool(name=t.name, description=t.description, input_schema=input_schema(t), handler=handler)


#: Transcript lines kept in memory: the conversation (messages and the attachments they chain
#: through). Bookkeeping lines are not: queued prompts, copies of API requests, cost state, the
#: last prompt (each repeats the conversation, and none is needed to resume it).
CONVERSATION = frozenset({"user", "assistant", "attachment", "system", "summary"})


@dataclasses.dataclass
class ClaudeAgent:
    """A declarative agent: the SDK options plus the Tether tools they serve."""

    options: ClaudeAgentOptions
    tools: list[Tool]


def transcript_dir(home: Path, cwd: str) -> Path:
    """Where the CLI keeps a working directory's session transcripts (non-alphanumerics → ``-``)."""
    return home / ".claude" / "projects" / re.sub(r"[^a-zA-Z0-9]", "-", cwd)


def work_dir() -> str:
    """The agent's working directory when its options name none: one fixed, empty-by-intent path
    (its built-in file tools are off), the same on every attempt and every node."""
    path = Path(tempfile.gettempdir()) / "tether-claude" / "work"
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


#: The per-attempt HOMEs: ``<tmp>/tether-claude-home-<pid>-<random>``, each holding ``OWNER``
#: locked (``flock``) by its attempt for as long as that process lives.
HOME_PREFIX = "tether-claude-home-"
OWNER = ".tether-owner"
#: A HOME without its lock file is one being made (a few microseconds) or one whose attempt died
#: in between; the latter are removed once they are this old.
UNOWNED_AFTER_S = 600.0


def new_home() -> tuple[Path, int]:
    """A new HOME and the descriptor that holds its lock (closed by the kernel when the process
    dies, however it dies). The lock file gets its name only once locked, so another attempt
    never sees it unlocked while its owner lives."""
    home = Path(tempfile.mkdtemp(prefix=f"{HOME_PREFIX}{os.getpid()}-"))
    fd = os.open(home / f"{OWNER}.new", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(home / f"{OWNER}.new", home / OWNER)
    return home, fd


def reap_homes(root: Path | None = None) -> list[Path]:
    """Remove the HOMEs of attempts that are gone (a SIGKILL skips the ``finally`` that removes
    them): their lock can be taken. Live attempts' HOMEs, on this node or any sharing the
    directory, stay. Returns what was removed."""
    removed = []
    for home in Path(root or tempfile.gettempdir()).glob(f"{HOME_PREFIX}*"):
        try:
            fd = os.open(home / OWNER, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            try:
                stale = time.time() - home.stat().st_mtime > UNOWNED_AFTER_S
            except OSError:
                continue
            if stale:
                shutil.rmtree(home, ignore_errors=True)
                removed.append(home)
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # its attempt is alive
        finally:
            os.close(fd)  # releases the lock taken above, if any
        shutil.rmtree(home, ignore_errors=True)
        removed.append(home)
    return removed


#: Started in place of the CLI: asks the kernel to SIGKILL it when the agent process dies, then
#: becomes the CLI (exec keeps the request). Without it a killed agent's CLI kept retrying the
#: dead proxy for minutes, holding the agent's stderr open.
REAPER = """\
import ctypes, os, signal, sys
if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL) != 0:  # PR_SET_PDEATHSIG
    sys.exit("tether: prctl(PR_SET_PDEATHSIG) failed: errno %d" % ctypes.get_errno())
if os.getppid() != {parent}:
    sys.exit(1)  # the agent died before the request was made
os.execv({cli!r}, [{cli!r}, *sys.argv[1:]])
"""


def reaped_cli(options: ClaudeAgentOptions, home: Path) -> str | None:
    """The ``cli_path`` that starts the options' CLI (their own ``cli_path``, else the one the SDK
    finds) so that it dies with this process; None where the kernel has no parent-death signal."""
    if not sys.platform.startswith("linux"):
        return None
    cli = str(options.cli_path) if options.cli_path is not None else SubprocessCLITransport("", options)._find_cli()
    wrapper = home / ".tether-cli"
    wrapper.write_text(f"#!{sys.executable} -I\n" + REAPER.format(parent=os.getpid(), cli=cli))
    wrapper.chmod(0o700)
    return str(wrapper)


class ClaudeAdapter(Adapter):
    framework = "claude"
    providers = ("anthropic",)
    agent_kind = ((ClaudeAgentOptions, ClaudeAgent), "ClaudeAgentOptions")

    def build(self, spec: AgentSpec, session: AgentSession) -> ClaudeAgent:
        options = ClaudeAgentOptions(
            model=spec.model,
            system_prompt=spec.instructions or "",
            tools=[],  # no built-in tools: a declarative agent has only its Tether tools
            allowed_tools=[tool_name(t) for t in spec.tools],
            max_turns=spec.max_turns,
            setting_sources=[],
        )
        return ClaudeAgent(options, list(spec.tools))

    async def run(self, agent: Any, prompt: str, session: AgentSession) -> str:
        # The SDK waits 60 s (its default) for a CLI to start; many CLIs starting at once on a
        # busy node take longer. A default only: the user's own setting wins.
        os.environ.setdefault("CLAUDE_CODE_STREAM_CLOSE_TIMEOUT", "300000")
        if isinstance(agent, ClaudeAgentOptions):
            agent = ClaudeAgent(agent, [])
        stop = _Stop()
        options = self._options(agent, session, stop)
        reap_homes()
        home, owner = new_home()
        try:
            options = dataclasses.replace(options, env={**options.env, **self._env(session, home)})
            if cli := reaped_cli(options, home):
                options = dataclasses.replace(options, cli_path=cli)
            cwd = str(options.cwd)
            resumed, written = self._restore(session.history, home, cwd)
            if resumed:
                options = dataclasses.replace(options, resume=resumed)
            result = await self._query(prompt, options, stop)
            if stop.suspended is not None:
                raise stop.suspended
            if result is None:
                raise RuntimeError("the Claude CLI ended without a result")
            if result.is_error:
                raise RuntimeError(f"the Claude CLI failed: {result.subtype}: {result.result or ''}")
            if session.run is not None:
                session.run.framework_cost_usd = (session.run.framework_cost_usd or 0.0) + (result.total_cost_usd or 0.0)
            session.new_items.extend(self._new_transcript([*session.history, *written], home, cwd, result.session_id))
            return result.result or ""
        finally:
            shutil.rmtree(home, ignore_errors=True)
            os.close(owner)

    # -- pieces ----------------------------------------------------------------------------------
    @staticmethod
    def _options(agent: ClaudeAgent, session: AgentSession, stop: _Stop) -> ClaudeAgentOptions:
        options = agent.options
        changes: dict[str, Any] = {}
        if agent.tools:
            servers = dict(options.mcp_servers) if isinstance(options.mcp_servers, dict) else {}
            servers[SERVER] = create_sdk_mcp_server(SERVER, tools=[mcp_tool(t, stop) for t in agent.tools])
            changes["mcp_servers"] = servers
        if options.tools is None:
            changes["tools"] = []  # built-in tools only where the user's own options list them
        if options.setting_sources is None:
            changes["setting_sources"] = []
        if options.cwd is None:
            changes["cwd"] = work_dir()
        if session.max_turns and options.max_turns is None:
            changes["max_turns"] = session.max_turns
        if session.stream:
            changes["include_partial_messages"] = True
        return dataclasses.replace(options, **changes)

    @staticmethod
    def _env(session: AgentSession, home: Path) -> dict[str, str]:
        env = {**OFFLINE_ENV, **FOREGROUND_ENV, "HOME": str(home), "ANTHROPIC_BASE_URL": session.proxy_url("anthropic")}
        if key := session.api_key("anthropic"):
            env["ANTHROPIC_API_KEY"] = key
        return env

    @staticmethod
    async def _query(prompt: str, options: ClaudeAgentOptions, stop: _Stop) -> ResultMessage | None:
        """The SDK's own ``query()``; cancelled as soon as a tool waits for approval."""
        result: ResultMessage | None = None

        async def consume() -> None:
            nonlocal result
            async for message in query(prompt=prompt, options=options):
                if isinstance(message, ResultMessage):
                    result = message

        task = asyncio.ensure_future(consume())
        waiter = asyncio.ensure_future(stop.event.wait())
        try:
            await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if stop.suspended is None:
            task.result()  # the CLI's own failure, if any
        return result

    @staticmethod
    def _restore(history: list[Any], home: Path, cwd: str) -> tuple[str | None, list[Any]]:
        """Write the stored transcript into the new HOME as one session; its id, to resume.

        Memory holds one segment per run, each its own CLI session whose first line has no
        parent. The CLI resumes by following ``parentUuid`` back from the last line, so each
        segment's first line is chained to the previous segment's last (runs that wrote
        concurrently come one after the other) and all lines get the last session's id."""
        lines = [h for h in history if isinstance(h, dict)]
        session_ids = [h["sessionId"] for h in lines if isinstance(h.get("sessionId"), str)]
        if not session_ids:
            return None, []
        session_id = session_ids[-1]
        chained: list[dict[str, Any]] = []
        last_uuid: str | None = None
        for line in lines:
            line = {**line, "sessionId": session_id} if "sessionId" in line else dict(line)
            if "parentUuid" in line and line["parentUuid"] is None and last_uuid is not None:
                line["parentUuid"] = last_uuid
            if isinstance(line.get("uuid"), str):
                last_uuid = line["uuid"]
            chained.append(line)
        folder = transcript_dir(home, cwd)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{session_id}.jsonl").write_text("".join(json.dumps(h) + "\n" for h in chained))
        return session_id, chained

    @staticmethod
    def _new_transcript(known: list[Any], home: Path, cwd: str, session_id: str) -> list[Any]:
        """The transcript lines this run added (neither in memory nor restored from it)."""
        path = transcript_dir(home, cwd) / f"{session_id}.jsonl"
        if not path.exists():
            return []
        seen = {json.dumps(h, sort_keys=True) for h in known}
        out = []
        for line in path.read_text().splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict) and item.get("type") in CONVERSATION and json.dumps(item, sort_keys=True) not in seen:
                out.append(item)
        return out
