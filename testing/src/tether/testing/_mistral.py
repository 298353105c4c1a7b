"""Mistral wire formats: chat completions and the beta conversations API."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ._common import Call, Ids, Protocol, Reply, RequestError, RequestView, chat_messages_view, pieces, sse, text_of

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


def _usage(reply: Reply) -> dict[str, Any]:
    u = reply.usage
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.total_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


def _tool_call(c: Any, index: int) -> dict[str, Any]:
    return {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}, "index": index}


class MistralChat(Protocol):
    name = "mistral-chat"
    provider = "mistral"

    def read(self, call: Call) -> RequestView:
        return chat_messages_view(call.body)

    def response_id(self, ids: Ids) -> str:
        return ids.hex(32)

    def tool_call_id(self, ids: Ids) -> str:
        return ids.alnum(9)

    def error(self, status: int, message: str) -> dict[str, Any]:
        return mistral_error(status, message)

    def render(self, reply: Reply, call: Call, ids: Ids) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or "", "prefix": False}
        if reply.tool_calls:
            message["tool_calls"] = [_tool_call(c, i) for i, c in enumerate(reply.tool_calls)]
        choice = {"index": 0, "message": message, "finish_reason": _finish(reply)}
        return {**self._envelope(reply, "chat.completion"), "choices": [choice], "usage": _usage(reply)}

    def frames(self, reply: Reply, call: Call, ids: Ids) -> list[bytes]:
        base = self._envelope(reply, "chat.completion.chunk")

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            return sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})

        out = [chunk({"role": "assistant", "content": ""})]
        out += [chunk({"content": p}) for p in pieces(reply.text or "")]
        if reply.tool_calls:  # Mistral sends each tool call whole, in one delta
            out.append(chunk({"tool_calls": [_tool_call(c, i) for i, c in enumerate(reply.tool_calls)]}))
        out.append(chunk({"content": ""}, _finish(reply), usage=_usage(reply)))
        out.append(sse("[DONE]"))
        return out

    @staticmethod
    def _envelope(reply: Reply, obj: str) -> dict[str, Any]:
        return {"id": reply.id, "object": obj, "created": reply.created, "model": reply.model}


def _finish(reply: Reply) -> str:
    return "tool_calls" if reply.tool_calls else "stop"


@dataclass
class _Conversation:
    first_user_text: str
    model: str
    #: Appends that carried function results: each answers one tool-calling turn.
    answered_turns: int = 0
    #: Every entry in order, inputs and outputs, as ``GET /v1/conversations/{id}/history`` lists them.
    entries: list[dict[str, Any]] = field(default_factory=list)


class MistralConversations(Protocol):
    """``POST /v1/conversations`` (start), ``POST /v1/conversations/{id}`` (append) and
    ``GET /v1/conversations/{id}/history`` (:meth:`history`).

    Like the real API the history lives on the server: an append carries only the new entries,
    so the turn index is the number of appends with ``function.result`` entries the server has
    accepted for that conversation (parallel results in one append answer one turn).
    """

    name = "mistral-conversations"
    provider = "mistral"

    def __init__(self) -> None:
        self._conversations: dict[str, _Conversation] = {}
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

    def _save(self) -> None:
        """Called with the lock held."""
        if self._state_path is None:
            return
        data = {"replies": self._replies, "conversations": {k: asdict(v) for k, v in self._conversations.items()}}
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
        if conversation_id is None:  # start: whatever history the inputs carry
            first_user = next((text_of(e.get("content")) for e in entries if _is_user_input(e)), "")
            model = str(body.get("model") or body.get("agent_id") or "mistral-medium-latest")
            turns = _function_call_runs(entries)
        else:
            state = self._state(conversation_id)
            first_user, model = state.first_user_text, state.model
            turns = state.answered_turns + (1 if results else 0)
        return RequestView(
            model=model,
            stream=bool(body.get("stream")),
            first_user_text=first_user,
            tool_turns=turns,
            tool_results=results,
        )

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
        with self._lock:
            state = self._conversations.setdefault(conversation_id, _Conversation(view.first_user_text, view.model))
            state.answered_turns = view.tool_turns
            state.entries += [*taken, *self._outputs(reply)]
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

    def tool_call_id(self, ids: Ids) -> str:
        return ids.alnum(9)

    def error(self, status: int, message: str) -> dict[str, Any]:
        return mistral_error(status, message)

    def render(self, reply: Reply, call: Call, ids: Ids) -> dict[str, Any]:
        return {
            "object": "conversation.response",
            "conversation_id": self._conversation_id(reply, call),
            "outputs": self._outputs(reply),
            "usage": _usage(reply),
        }

    def frames(self, reply: Reply, call: Call, ids: Ids) -> list[bytes]:
        now = _iso(reply)

        def event(kind: str, **fields: Any) -> bytes:
            return sse({"type": kind, "created_at": now, **fields}, event=kind)

        out = [event("conversation.response.started", conversation_id=self._conversation_id(reply, call))]
        for index, entry in enumerate(self._outputs(reply)):
            common = {"output_index": index, "id": entry["id"], "model": reply.model, "agent_id": None}
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
        out.append(event("conversation.response.done", usage=_usage(reply)))
        return out

    @staticmethod
    def _conversation_id(reply: Reply, call: Call) -> str:
        return call.path_params.get("conversation_id") or reply.id

    @staticmethod
    def _outputs(reply: Reply) -> list[dict[str, Any]]:
        # Entry ids follow from the reply's own (seeded) id, so the answer and the history agree.
        now = _iso(reply)
        entry = {"object": "entry", "created_at": now, "completed_at": now, "agent_id": None, "model": reply.model}
        outputs: list[dict[str, Any]] = []
        if reply.text is not None:
            outputs.append(
                {
                    **entry,
                    "type": "message.output",
                    "id": _entry_id(reply, "msg"),
                    "role": "assistant",
                    "content": reply.text,
                }
            )
        for c in reply.tool_calls:
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
        return outputs


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
