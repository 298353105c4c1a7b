"""``ADAPTER.warm_up()`` (what a warm worker, ``tether exec --warm``, runs before its attempt):
the SDK's first-use work is done — its Responses resource imported, a tool call and an answer
parsed — in a fresh process, without opening a connection or touching a store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, socket, sys
connects = []
connect = socket.socket.connect
def observed(self, address):
    connects.append(str(address))
    return connect(self, address)
socket.socket.connect = observed
import tether_openai
before = "openai.resources.responses" in sys.modules
tether_openai.ADAPTER.warm_up()
print(json.dumps({"before": before, "after": "openai.resources.responses" in sys.modules, "connects": connects}))
"""


def test_warm_up_uses_the_sdk_without_network_or_store(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "TETHER_STORE": str(tmp_path / "store"), "OPENAI_API_KEY": "sk-warm-up"}
    env.pop("OPENAI_AGENTS_DISABLE_TRACING", None)  # the warm-up turns tracing off itself
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"before": False, "after": True, "connects": []}
    assert not (tmp_path / "store").exists()
