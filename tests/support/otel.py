"""A real OpenTelemetry Collector (scripts/otel-collector.sh: an OTLP receiver and a file exporter)
on a loopback port, and the spans it received, read back from its OTLP JSON file."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.wait import wait_for

REPO = Path(__file__).resolve().parents[2]


def collector_bin() -> Path:
    """``$TETHER_OTEL_BIN``, or the cached build (scripts/test.sh starts it in the background;
    the script's lock makes this wait for that build, then reuse it)."""
    if os.environ.get("TETHER_OTEL_BIN"):
        return Path(os.environ["TETHER_OTEL_BIN"]) / "otelcol-tether"
    out = subprocess.run([str(REPO / "scripts" / "otel-collector.sh")], capture_output=True, text=True, timeout=3600)
    assert out.returncode == 0, f"scripts/otel-collector.sh failed:\n{out.stderr[-3000:]}"
    return Path(out.stdout.strip().splitlines()[-1]) / "otelcol-tether"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _value(v: dict[str, Any]) -> Any:
    if "arrayValue" in v:
        return tuple(_value(x) for x in v["arrayValue"].get("values", []))
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            return v[key]
    if "intValue" in v:
        return int(v["intValue"])
    return None


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent: str
    name: str
    attributes: dict[str, Any]
    status: dict[str, Any]
    start_ns: int
    end_ns: int

    def __getitem__(self, key: str) -> Any:
        return self.attributes[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.attributes.get(key, default)


class Collector:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.out = root / "spans.jsonl"
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def raw(self) -> str:
        return self.out.read_text() if self.out.exists() else ""

    def spans(self) -> list[Span]:
        found = []
        for line in self.raw().splitlines():
            for resource in json.loads(line).get("resourceSpans", []):
                for scope in resource.get("scopeSpans", []):
                    for s in scope.get("spans", []):
                        found.append(
                            Span(
                                s["traceId"],
                                s["spanId"],
                                s.get("parentSpanId", ""),
                                s["name"],
                                {a["key"]: _value(a["value"]) for a in s.get("attributes", [])},
                                s.get("status", {}),
                                int(s["startTimeUnixNano"]),
                                int(s["endTimeUnixNano"]),
                            )
                        )
        return found

    def of_run(self, run_id: str) -> list[Span]:
        return [s for s in self.spans() if s.get("tether.run.id") == run_id]


@contextlib.contextmanager
def collector(root: Path) -> Iterator[Collector]:
    """The collector, listening for OTLP/HTTP on a free loopback port, writing what it receives
    to ``root/spans.jsonl`` (flushed every 50 ms)."""
    c = Collector(root)
    config = {
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{c.port}"}}}},
        "exporters": {"file": {"path": str(c.out), "flush_interval": "50ms"}},
        "service": {
            "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["file"]}},
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
        },
    }
    (root / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    log = (root / "collector.log").open("w")
    proc = subprocess.Popen([str(collector_bin()), "--config", f"file:{root / 'config.yaml'}"], stdout=log, stderr=subprocess.STDOUT)
    try:

        def listening() -> bool:
            assert proc.poll() is None, (root / "collector.log").read_text()
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", c.port)) == 0

        wait_for(listening, timeout=60, what="the collector to listen")
        yield c
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
