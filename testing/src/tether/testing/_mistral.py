"""Mistral wire formats: chat completions and the beta conversations API."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ._common import Call, ChatCompletions, Ids, Protocol, Reply, RequestError, RequestView, chat_usage, pieces, sse, text_of

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "unauthorized",
    404: "not_found",
    422: "invalid_request_error",
    429: "rate_limited",
}


def mistral_error(status: int, message: str) -> dict[str, Any]:
    return {
        "object": "error",
        "message": message,
        "type": _ERROR_TYPES.get(status, "internal_server_error"),
        "param": None,
        "code": str(status),
    }


def _tool_call(c: Any, index: int) -> dict[str, Any]:
    return {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}, "index": index}


class _MistralFormat(Protocol):
    """What both Mistral formats share: tool call ids and the error body."""

    provider = "mistral"

    def tool_call_id(self, ids: Ids) -> str:
        return ids.alnum(9)

    def error(self, status: int, message: str) -> dict[str, Any]:
        return mistral_error(status, message)


class MistralChat(_MistralFormat, ChatCompletions):
    name = "mistral-chat"

    def response_id(self, ids: Ids) -> str:
        return ids.hex(32)

    def render(self, reply: Reply, call: Call, ids: Ids) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or "", "prefix": False}
        if reply.tool_calls:
            message["tool_calls"] = [_tool_call(c, i) for i, c in enumerate(reply.tool_calls)]
        choice = {"index": 0, "message": message, "finish_reason": self.finish_reason(reply)}
        return {**self.envelope(reply, "chat.completion"), "choices": [choice], "usage": chat_usage(reply)}

    def frames(self, reply: Reply, call: Call, ids: Ids) -> list[bytes]:
        base = self.envelope(reply, "chat.completion.chunk")

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            return sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})

        out = [chunk({"role": "assistant", "content": ""})]
        out += [chunk({"content": p}) for p in pieces(reply.text or "")]
        if reply.tool_calls:  # Mistral sends each tool call whole, in one delta
            out.append(chunk({"tool_calls": [_tool_call(c, i) for i, c in enumerate(reply.tool_calls)]}))
        out.append(chunk({"content": ""}, self.finish_reason(reply), usage=chat_usage(reply)))
        out.append(sse("[DONE]"))
        return out


@dataclass
class _Conversation:
    first_user_text: str
    model: str
    #: Appends that carried function results: each answers one tool-calling turn.
    answered_turns: int = 0
    #: Every entry in order, inputs and outputs, as ``GET /v1/conversations/{id}/history`` lists them.
    entries: list[dict[str, Any]] = field(default_factory=list)
    #: A conversation with server-side agents: the agent an append goes to (the last one that
    #: answered: after a handoff, the agent handed to), and per agent its turns that called tools
    #: or handed off (the index of its next scripted turn).
    agent_id: str | None = None
    agent_turns: dict[str, int] = field(default_factory=dict)


class MistralConversations(_MistralFormat):
    """``POST /v1/conversations`` (start), ``POST /v1/conversations/{id}`` (append) and
    ``GET /v1/conversations/{id}/history`` (:meth:`history`).

    Like the real API the history lives on the server: an append carries only the new entries,
    so the turn index is the number of appends with ``function.result`` entries the server has
    accepted for that conversation (parallel results in one append answer one turn).

    Agents (``POST/GET/PATCH /v1/agents``): a conversation started with ``agent_id`` is answered by
    that agent (its instructions are the script's system text, its model the model); a scripted
    ``handoff`` turn hands the conversation to one of the agent's ``handoffs``, which answers in
    the same response after an ``agent.handoff`` entry, and gets the conversation's later appends.
    An agent's turn index counts its own turns that called tools or handed off.
    """

    name = "mistral-conversations"

    def __init__(self) -> None:
        self._conversations: dict[str, _Conversation] = {}
        self._agents: dict[str, dict[str, Any]] = {}
        self._replies = 0
        self._lock = threading.Lock()
        self._state_path: Path | None = None

    def keep_state_in(self, path: Path) -> None:
        """Keep the conversations in a file, as the real server keeps them across its clients'
        restarts: a fake provider started again on the same file knows them (``tether run`` starts
        one per invocation, and a run resumed after an approval appends to its conversation)."""
        self._state_path = path
        if path.exists():
            data = json.loads(path.read_text())
            with self._lock:
                self._replies = data["replies"]
                self._conversations = {k: _Conversation(**v) for k, v in data["conversations"].items()}
                self._agents = data.get("agents", {})

    def _save(self) -> None:
        """Called with the lock held."""
        if self._state_path is None:
            return
        data = {
            "replies": self._replies,
            "conversations": {k: asdict(v) for k, v in self._conversations.items()},
            "agents": self._agents,
        }
        self._state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self._state_path)

    def read(self, call: Call) -> RequestView:
        body = call.body
        inputs = body.get("inputs")
        entries = [{"type": "message.input", "role": "user", "content": inputs}] if isinstance(inputs, str) else inputs
        entries = [e for e in entries or () if isinstance(e, Mapping)]
        results = tuple(str(e.get("result", "")) for e in entries if e.get("type") == "function.result")
        conversation_id = call.path_params.get("conversation_id")
        agent: dict[str, Any] | None = None
        if conversation_id is None:  # start: whatever history the inputs carry
            first_user = next((text_of(e.get("content")) for e in entries if _is_user_input(e)), "")
            agent = self.agent(str(body["agent_id"])) if body.get("agent_id") else None
            model = str(body.get("model") or (agent or {}).get("model") or "mistral-medium-latest")
            turns = _function_call_runs(entries)
        else:
            state = self._state(conversation_id)
            first_user, model = state.first_user_text, state.model
            turns = state.answered_turns + (1 if results else 0)
            if state.agent_id is not None:
                agent = self.agent(state.agent_id)
                model, turns = agent["model"], state.agent_turns.get(state.agent_id, 0)
        view = RequestView(model=model, stream=bool(body.get("stream")), first_user_text=first_user, tool_turns=turns, tool_results=results)
        return self._as_agent(view, agent) if agent else view

    @staticmethod
    def _as_agent(view: RequestView, agent: Mapping[str, Any]) -> RequestView:
        return replace(view, model=str(agent["model"]), system_text=str(agent.get("instructions") or ""), agent=str(agent["id"]))

    def handoff(self, view: RequestView, target: str, call: Call) -> RequestView:
        if not view.agent:
            raise RequestError(400, f"fake provider: a handoff to {target!r} needs a conversation started with agent_id")
        current = self.agent(view.agent)
        handoffs = [self.agent(i) for i in current.get("handoffs") or ()]
        nxt = next((a for a in handoffs if target in (a["name"], a["id"])), None)
        if nxt is None:
            names = [a["name"] for a in handoffs]
            raise RequestError(400, f"fake provider: agent {current['name']!r} cannot hand off to {target!r}; its handoffs: {names}")
        with self._lock:
            state = self._conversations.get(call.path_params.get("conversation_id") or "")
            turns = state.agent_turns.get(nxt["id"], 0) if state else 0
        return self._as_agent(replace(view, tool_turns=turns), nxt)

    # -- agents ------------------------------------------------------------------------------------
    def agent(self, agent_id: str) -> dict[str, Any]:
        """An agent, as ``GET /v1/agents/{id}`` answers."""
        with self._lock:
            found = self._agents.get(agent_id)
        if found is None:
            raise RequestError(404, f"Agent {agent_id} not found")
        return dict(found)

    def create_agent(self, body: Mapping[str, Any]) -> dict[str, Any]:
        if not body.get("model") or not body.get("name"):
            raise RequestError(422, "an agent needs a model and a name")
        for handoff in body.get("handoffs") or ():
            self.agent(str(handoff))  # 404 for an agent that does not exist
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        with self._lock:
            agent_id = "ag_" + hashlib.sha256(f"{len(self._agents)}:{body['name']}".encode()).hexdigest()[:32]
            agent = {
                "object": "agent",
                "id": agent_id,
                "version": 0,
                "versions": [0],
                "created_at": now,
                "updated_at": now,
                "deployment_chat": False,
                "source": "api",
                "tools": [],
                **{k: v for k, v in body.items() if k in _AGENT_FIELDS},
            }
            self._agents[agent_id] = agent
            self._save()
        return dict(agent)

    def update_agent(self, agent_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``PATCH``: the fields given replace the agent's, as a new version."""
        agent = self.agent(agent_id)
        for handoff in body.get("handoffs") or ():
            self.agent(str(handoff))
        version = agent["version"] + 1
        agent.update({k: v for k, v in body.items() if k in _AGENT_FIELDS and v is not None})
        agent.update(
            version=version, versions=[*agent["versions"], version], updated_at=datetime.now(UTC).isoformat().replace("+00:00", "Z")
        )
        with self._lock:
            self._agents[agent_id] = agent
            self._save()
        return dict(agent)

    def _state(self, conversation_id: str) -> _Conversation:
        with self._lock:
            state = self._conversations.get(conversation_id)
        if state is None:
            raise RequestError(404, f"Conversation {conversation_id} not found")
        return state

    def commit(self, view: RequestView, reply: Reply, call: Call) -> None:
        conversation_id = call.path_params.get("conversation_id") or reply.id
        inputs = call.body.get("inputs")
        entries = [{"type": "message.input", "role": "user", "content": inputs}] if isinstance(inputs, str) else list(inputs or ())
        now = _iso(reply)
        taken = [
            {**e, "object": "entry", "id": _entry_id(reply, f"in{i}"), "created_at": now, "completed_at": None}
            for i, e in enumerate(entries)
            if isinstance(e, Mapping)
        ]
        outputs = self._outputs(reply)
        with self._lock:
            state = self._conversations.setdefault(conversation_id, _Conversation(view.first_user_text, view.model))
            state.answered_turns = view.tool_turns
            if view.agent:
                if state.agent_id is None:  # a start: the entry agent, with the turns its inputs carry
                    state.agent_turns = {view.agent: view.tool_turns}
                for part in (*reply.chain, reply):
                    if part.tool_calls or part is not reply:  # called tools, or handed off
                        state.agent_turns[part.agent] = state.agent_turns.get(part.agent, 0) + 1
                state.agent_id = reply.agent
            state.entries += [*taken, *outputs]
            self._save()

    def history(self, conversation_id: str) -> dict[str, Any]:
        """The conversation's entries, as ``GET /v1/conversations/{id}/history`` answers."""
        state = self._state(conversation_id)
        with self._lock:
            entries = list(state.entries)
        return {"object": "conversation.history", "conversation_id": conversation_id, "entries": entries}

    def reset(self) -> None:
        with self._lock:
            self._conversations.clear()
            self._agents.clear()
            self._replies = 0
            self._save()

    def response_id(self, ids: Ids) -> str:
        # The reply id is the conversation id: a start creates it, an append must keep it. As on
        # the real server every start is a new conversation, even with the same body (the count
        # of replies is mixed in), and the ids stay reproducible for a seed.
        with self._lock:
            self._replies += 1
            n = self._replies
            self._save()
        return f"conv_{ids.hex(24)}{n:08x}"

    def render(self, reply: Reply, call: Call, ids: Ids) -> dict[str, Any]:
        return {
            "object": "conversation.response",
            "conversation_id": self._conversation_id(reply, call),
            "outputs": self._outputs(reply),
            "usage": chat_usage(reply),
        }

    def frames(self, reply: Reply, call: Call, ids: Ids) -> list[bytes]:
        now = _iso(reply)

        def event(kind: str, **fields: Any) -> bytes:
            return sse({"type": kind, "created_at": now, **fields}, event=kind)

        out = [event("conversation.response.started", conversation_id=self._conversation_id(reply, call))]
        for index, entry in enumerate(self._outputs(reply)):
            if entry["type"] == "agent.handoff":
                previous = {k: entry[k] for k in ("previous_agent_id", "previous_agent_name")}
                out.append(event("agent.handoff.started", output_index=index, id=entry["id"], **previous))
                following = {k: entry[k] for k in ("next_agent_id", "next_agent_name")}
                out.append(event("agent.handoff.done", output_index=index, id=entry["id"], **following))
                continue
            common = {"output_index": index, "id": entry["id"], "model": entry["model"], "agent_id": entry["agent_id"]}
            if entry["type"] == "message.output":
                out += [
                    event("message.output.delta", **common, content_index=0, role="assistant", content=p)
                    for p in pieces(entry["content"]) or [""]
                ]
            else:
                out += [
                    event(
                        "function.call.delta",
                        **common,
                        name=entry["name"],
                        tool_call_id=entry["tool_call_id"],
                        arguments=p,
                    )
                    for p in pieces(entry["arguments"]) or ["{}"]
                ]
        out.append(event("conversation.response.done", usage=chat_usage(reply)))
        return out

    @staticmethod
    def _conversation_id(reply: Reply, call: Call) -> str:
        return call.path_params.get("conversation_id") or reply.id

    def _outputs(self, reply: Reply) -> list[dict[str, Any]]:
        # Entry ids follow from the reply's own (seeded) id, so the answer and the history agree.
        now = _iso(reply)
        outputs: list[dict[str, Any]] = []
        parts = (*reply.chain, reply)  # each agent's answer; all but the last handed off
        for i, part in enumerate(parts):
            entry = {"object": "entry", "created_at": now, "completed_at": now, "agent_id": part.agent or None, "model": part.model}
            if part.text is not None:
                outputs.append(
                    {
                        **entry,
                        "type": "message.output",
                        "id": _entry_id(reply, "msg" + (f"@{i}" if i else "")),
                        "role": "assistant",
                        "content": part.text,
                    }
                )
            for c in part.tool_calls:
                outputs.append(
                    {
                        **entry,
                        "type": "function.call",
                        "id": _entry_id(reply, f"fc{c.id}"),
                        "tool_call_id": c.id,
                        "name": c.name,
                        "arguments": c.arguments_json,
                    }
                )
            if i + 1 < len(parts):
                previous, following = self.agent(part.agent), self.agent(parts[i + 1].agent)
                outputs.append(
                    {
                        "object": "entry",
                        "type": "agent.handoff",
                        "created_at": now,
                        "completed_at": now,
                        "id": "handoff_" + hashlib.sha256(f"{reply.id}:handoff@{i}".encode()).hexdigest()[:32],
                        "previous_agent_id": previous["id"],
                        "previous_agent_name": previous["name"],
                        "next_agent_id": following["id"],
                        "next_agent_name": following["name"],
                    }
                )
        return outputs


#: What an agent is made of (``beta.agents.create`` / ``update``); the rest the server sets.
_AGENT_FIELDS = frozenset(
    {"model", "name", "instructions", "tools", "completion_args", "guardrails", "description", "handoffs", "metadata", "version_message"}
)


def _entry_id(reply: Reply, what: str) -> str:
    kind = "fc" if what.startswith("fc") else "msg"
    return f"{kind}_" + hashlib.sha256(f"{reply.id}:{what}".encode()).hexdigest()[:32]


def _iso(reply: Reply) -> str:
    return datetime.fromtimestamp(reply.created, UTC).isoformat().replace("+00:00", "Z")


def _is_user_input(entry: Mapping[str, Any]) -> bool:
    return entry.get("role") == "user" and entry.get("type", "message.input") == "message.input"


def _function_call_runs(entries: list[Mapping[str, Any]]) -> int:
    runs, in_run = 0, False
    for entry in entries:
        is_call = entry.get("type") == "function.call"
        runs += is_call and not in_run
        in_run = is_call
    return runs
