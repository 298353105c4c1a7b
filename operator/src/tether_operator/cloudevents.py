"""CloudEvents 1.0 of runs and approvals, POSTed to one sink (env TETHER_CLOUDEVENTS_SINK, chart
value cloudEvents.sink), in structured mode (`Content-Type: application/cloudevents+json`).

    dev.tether.agentrun.<phase>     a run entered Pending, Running, AwaitingApproval, Succeeded or
                                    Failed (the suffix is status.phase as written)
    dev.tether.approval.requested   a run asks for an approval
    dev.tether.approval.decided     it was decided (by a person's AgentApproval, or `timeout`)

`source` is the run's API path, `subject` its name; `id` is derived from what happened (the
run's uid, the phase and attempt, or the approval id), so a consumer can drop a repeat. The data
is what status says (the kstatus reason and message, attempts, cost; the approval's tool,
arguments, decision): already scrubbed of Secret values. Delivery never holds a run up: events
wait in a bounded queue (dropped, with a log line, when it is full), each is tried 3 times on a
connection error, 429 or 5xx, then dropped. At most once across an operator restart: a
transition the old process saw is not sent again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from tether.api import API_VERSION

log = logging.getLogger(__name__)

RUN_TYPE = "dev.tether.agentrun."
APPROVAL_REQUESTED = "dev.tether.approval.requested"
APPROVAL_DECIDED = "dev.tether.approval.decided"
CONTENT_TYPE = "application/cloudevents+json"
QUEUE = 1000
ATTEMPTS = 3


def sink_error(sink: str) -> str | None:
    """Why `sink` cannot be a CloudEvents sink, or None (empty: off)."""
    if not sink:
        return None
    parts = urlsplit(sink)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        return f"TETHER_CLOUDEVENTS_SINK={sink!r} (chart value cloudEvents.sink): expected an http or https URL without credentials"
    return None


def run_source(namespace: str, name: str) -> str:
    return f"/apis/{API_VERSION}/namespaces/{namespace}/agentruns/{name}"


class Emitter:
    """Sends events to the sink in the background; `emit` never waits."""

    def __init__(self, sink: str, timeout: float = 10.0, backoff: float = 1.0) -> None:
        self.sink = sink
        self.timeout = timeout
        self.backoff = backoff
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE)
        self.sent = self.dropped = 0
        self._task: asyncio.Task[None] | None = None

    def emit(self, type_: str, source: str, subject: str, id_: str, data: dict[str, Any]) -> None:
        event = {
            "specversion": "1.0",
            "type": type_,
            "source": source,
            "subject": subject,
            "id": id_,
            "time": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "datacontenttype": "application/json",
            "data": data,
        }
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._deliver())
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("CloudEvents queue full (%d): dropped %s %s", QUEUE, type_, id_)

    async def _deliver(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout)) as session:
            while True:
                event = await self.queue.get()
                await self._send(session, event)

    async def _send(self, session: aiohttp.ClientSession, event: dict[str, Any]) -> None:
        body = json.dumps(event, default=str)
        why = ""
        for attempt in range(ATTEMPTS):
            try:
                async with session.post(self.sink, data=body, headers={"Content-Type": CONTENT_TYPE}) as rsp:
                    if rsp.status < 300:
                        self.sent += 1
                        return
                    why = f"HTTP {rsp.status}"
                    if rsp.status < 500 and rsp.status != 429:
                        break  # the sink refuses this event: sending it again changes nothing
            except (aiohttp.ClientError, TimeoutError) as exc:
                why = f"{type(exc).__name__}: {exc}"
            if attempt + 1 < ATTEMPTS:
                await asyncio.sleep(self.backoff * 2**attempt)
        self.dropped += 1
        log.warning("CloudEvent %s %s not delivered to the sink: %s", event["type"], event["id"], why)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
