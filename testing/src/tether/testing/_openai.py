"""OpenAI wire formats: Chat Completions and Responses."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ._common import Call, ChatCompletions, Ids, Protocol, Reply, RequestError, RequestView, chat_usage, pieces, sse, text_of

# status -> (error.type, error.code), as api.openai.com sends them
_ERRORS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def openai_error(status: int, message: str) -> dict[str, Any]:
    kind, code = _ERRORS.get(status, ("server_error", None))
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _chat_usage(reply: Reply) -> dict[str, Any]:
    usage = chat_usage(reply)
    usage["prompt_tokens_details"]["audio_tokens"] = 0
    usage["completion_tokens_details"] = {
        "reasoning_tokens": 0,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    }
    return usage


class _OpenAIFormat(Protocol):
    """What both OpenAI formats share: tool call ids and the error body."""

    provider = "openai"

    def tool_call_id(self, ids: Ids) -> str:
        return "call_" + ids.alnum(24)

    def error(self, status: int, message: str) -> dict[str, Any]:
        return openai_error(status, message)


class OpenAIChat(_OpenAIFormat, ChatCompletions):
    name = "openai-chat"

    def response_id(self, ids: Ids) -> str:
        return "chatcmpl-" + ids.alnum(29)

    def render(self, reply: Reply, call: Call, ids: Ids) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None, "annotations": []}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}} for c in reply.tool_calls
            ]
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": self.finish_reason(reply)}
        return {**self.envelope(reply, "chat.completion"), "choices": [choice], "usage": _chat_usage(reply)}

    def frames(self, reply: Reply, call: Call, ids: Ids) -> list[bytes]:
        include_usage = bool((call.body.get("stream_options") or {}).get("include_usage"))
        base = self.envelope(reply, "chat.completion.chunk")
        if include_usage:
            base["usage"] = None  # every chunk carries the key; only the last one a value

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return sse({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

        out = [chunk({"role": "assistant", "content": "", "refusal": None})]
        out += [chunk({"content": p}) for p in pieces(reply.text or "")]
        for i, c in enumerate(reply.tool_calls):
            head = {"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}
            out.append(chunk({"tool_calls": [head]}))
            out += [chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}) for p in pieces(c.arguments_json)]
        out.append(chunk({}, self.finish_reason(reply)))
        if include_usage:
            out.append(sse({**base, "choices": [], "usage": _chat_usage(reply)}))
        out.append(sse("[DONE]"))
        return out

    def envelope(self, reply: Reply, obj: str) -> dict[str, Any]:
        return {**super().envelope(reply, obj), "service_tier": "default", "system_fingerprint": "fp_tether_fake"}


class OpenAIResponses(_OpenAIFormat):
    """``POST /v1/responses``. Remembers stored responses so ``previous_response_id`` works."""

    name = "openai-responses"

    def __init__(self) -> None:
        # response id -> (first user text, tool-calling turns up to and including that response)
        self._stored: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()

    def read(self, call: Call) -> RequestView:
        body = call.body
        items = body.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else list(items or ())
        items = [i for i in items if isinstance(i, Mapping)]
        first_user, turns = "", 0
        previous = body.get("previous_response_id")
        if previous:
            with self._lock:
                if previous not in self._stored:
                    raise RequestError(400, f"Previous response with id '{previous}' not found.")
                first_user, turns = self._stored[previous]
        if not first_user:
            first_user = next((text_of(i.get("content")) for i in items if _is_user_message(i)), "")
        turns += _function_call_runs(items)
        last_call = max((n for n, i in enumerate(items) if i.get("type") == "function_call"), default=-1)
        results = tuple(text_of(i.get("output")) for i in items[last_call + 1 :] if i.get("type") == "function_call_output")
        return RequestView(
            model=str(body.get("model") or ""),
            stream=bool(body.get("stream")),
            first_user_text=first_user,
            tool_turns=turns,
            tool_results=results,
            system_text="\n".join(
                [text_of(body.get("instructions"))] + [text_of(i.get("content")) for i in items if i.get("role") in ("system", "developer")]
            ),
        )

    def commit(self, view: RequestView, reply: Reply, call: Call) -> None:
        if call.body.get("store") is False:
            return
        with self._lock:
            self._stored[reply.id] = (view.first_user_text, view.tool_turns + (1 if reply.tool_calls else 0))

    def reset(self) -> None:
        with self._lock:
            self._stored.clear()

    def response_id(self, ids: Ids) -> str:
        return "resp_" + ids.hex(48)

    def render(self, reply: Reply, call: Call, ids: Ids) -> dict[str, Any]:
        return self._response(reply, call, self._output(reply, ids), status="completed")

    def frames(self, reply: Reply, call: Call, ids: Ids) -> list[bytes]:
        output = self._output(reply, ids)
        events: list[dict[str, Any]] = []

        def emit(kind: str, **fields: Any) -> None:
            events.append({"type": kind, "sequence_number": len(events), **fields})

        pending = self._response(reply, call, [], status="in_progress")
        pending["usage"] = None
        emit("response.created", response=pending)
        emit("response.in_progress", response=pending)
        for index, item in enumerate(output):
            if item["type"] == "message":
                self._message_events(emit, index, item)
            else:
                self._function_call_events(emit, index, item)
        emit("response.completed", response=self._response(reply, call, output, status="completed"))
        return [sse(e, event=e["type"]) for e in events]

    @staticmethod
    def _message_events(emit: Any, index: int, item: dict[str, Any]) -> None:
        text = item["content"][0]["text"]
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        ref = {"item_id": item["id"], "output_index": index}
        emit("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []})
        emit("response.content_part.added", **ref, content_index=0, part=part)
        for p in pieces(text):
            emit("response.output_text.delta", **ref, content_index=0, delta=p, logprobs=[])
        emit("response.output_text.done", **ref, content_index=0, text=text, logprobs=[])
        emit("response.content_part.done", **ref, content_index=0, part={**part, "text": text})
        emit("response.output_item.done", output_index=index, item=item)

    @staticmethod
    def _function_call_events(emit: Any, index: int, item: dict[str, Any]) -> None:
        ref = {"item_id": item["id"], "output_index": index}
        emit("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "arguments": ""})
        for p in pieces(item["arguments"]):
            emit("response.function_call_arguments.delta", **ref, delta=p)
        emit("response.function_call_arguments.done", **ref, name=item["name"], arguments=item["arguments"])
        emit("response.output_item.done", output_index=index, item=item)

    @staticmethod
    def _output(reply: Reply, ids: Ids) -> list[dict[str, Any]]:
        output: list[dict[str, Any]] = []
        if reply.text is not None:
            content = [{"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}]
            output.append(
                {
                    "type": "message",
                    "id": "msg_" + ids.hex(48),
                    "status": "completed",
                    "role": "assistant",
                    "content": content,
                }
            )
        for c in reply.tool_calls:
            output.append(
                {
                    "type": "function_call",
                    "id": "fc_" + ids.hex(48),
                    "call_id": c.id,
                    "name": c.name,
                    "arguments": c.arguments_json,
                    "status": "completed",
                }
            )
        return output

    @staticmethod
    def _response(reply: Reply, call: Call, output: list[dict[str, Any]], status: str) -> dict[str, Any]:
        body = call.body
        u = reply.usage
        return {
            "id": reply.id,
            "object": "response",
            "created_at": reply.created,
            "status": status,
            "completed_at": reply.created if status == "completed" else None,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": reply.model,
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p", 1.0),
            "truncation": body.get("truncation", "disabled"),
            "usage": {
                "input_tokens": u.input_tokens,
                "input_tokens_details": {"cached_tokens": u.cached_tokens, "cache_write_tokens": 0},
                "output_tokens": u.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": u.total_tokens,
            },
            "user": None,
            "metadata": body.get("metadata") or {},
        }


def _is_user_message(item: Mapping[str, Any]) -> bool:
    return item.get("role") == "user" and item.get("type", "message") == "message"


def _function_call_runs(items: list[Mapping[str, Any]]) -> int:
    """Tool-calling turns in a Responses input: runs of ``function_call`` items.

    A turn's parallel calls sit next to each other (reasoning items may precede them); anything
    else — their outputs, a message — ends the run.
    """
    runs, in_run = 0, False
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            runs += not in_run
            in_run = True
        elif kind != "reasoning":
            in_run = False
    return runs
