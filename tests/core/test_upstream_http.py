"""The library the seam calls providers with: ``httpx2`` where installed, else ``httpx``.

Every test environment has ``httpx2`` (the openai and anthropic SDKs bring it), so the fallback
runs here in a child process where importing ``httpx2`` fails: a live turn goes upstream through
``httpx``, is recorded, replays, and an upstream timeout still reaches the caller as a timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tether.testing import FakeProvider, Fault
from tether.wire.seam import upstream_http

CHILD = r"""
import asyncio, json, sys, tempfile
sys.modules["httpx2"] = None  # not installed
import httpx
from tether.run import Run
from tether.stores import LocalStore
from tether.wire.seam import upstream_http
from tether.wire.transport import AsyncWireTransport

upstream = sys.argv[1] + "/openai"
body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}]}

async def main():
    out = {"module": upstream_http().__name__}
    with tempfile.TemporaryDirectory() as d:
        store = LocalStore(d)
        for attempt in (1, 2):
            run = Run("fallback", store, upstreams={"openai": upstream}, overlap_writes=True)
            auth = {"authorization": "Bearer sk-test"}
            async with httpx.AsyncClient(transport=AsyncWireTransport("openai", run), headers=auth) as client:
                r = await client.post(upstream + "/v1/chat/completions", json=body)
                out[f"status{attempt}"] = r.status_code
                out[f"answer{attempt}"] = r.json()["choices"][0]["message"]["content"]
                try:
                    await client.post(upstream + "/v1/chat/completions", json={**body, "messages": [{"role": "user", "content": "slow"}]}, timeout=0.2)
                except httpx.TimeoutException as e:
                    out[f"timeout{attempt}"] = type(e).__name__
            await run.seam.recorded()
            out[f"live{attempt}"], out[f"replayed{attempt}"] = run.counters.model_live, run.counters.model_replayed
            await run.aclose()
    print(json.dumps(out))

asyncio.run(main())
"""


def test_the_seam_prefers_httpx2_here():
    assert upstream_http().__name__ == "httpx2"


def test_without_httpx2_the_seam_calls_upstream_with_httpx():
    with FakeProvider({"conversations": [{"turns": [{"text": "Hi there."}]}]}) as provider:
        # Upstream: attempt 1's turn and slow call, attempt 2's slow call (its turn replays).
        provider.inject(Fault("slow_first_byte:2", times=2, after=1))
        done = subprocess.run([sys.executable, "-c", CHILD, provider.url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["module"] == "httpx"
    assert out["status1"] == out["status2"] == 200 and out["answer1"] == out["answer2"] == "Hi there."
    assert (out["live1"], out["replayed1"]) == (1, 0), "the live turn was not recorded"
    assert (out["live2"], out["replayed2"]) == (0, 1), "the recorded turn did not replay"
    assert out["timeout1"] == out["timeout2"] == "ReadTimeout", "an upstream timeout must reach the caller as a timeout"
