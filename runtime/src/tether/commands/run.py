"""``tether run MANIFEST.yaml``: run an AgentRun on this machine, the embedded default.

Each attempt is ``tether exec`` in a child process (a Flyte local execution with the local
store), so a crash is a real process death and the retry a real new process. Progress prints as
steps complete (live or replayed, tokens, cost); the answer and a summary at the end.

- The manifest may hold the AgentRun and the AgentTools it names (multi-document YAML). Tool
  modules are imported from the manifest's folder.
- Without an API key for the model's provider (and no ``model.baseURL``), a fake provider is
  started with the script beside the manifest (``<name>.script.yaml``) — said plainly, so
  nobody mistakes it for a real model.
- The run id defaults to the AgentRun's name: running the same manifest again replays it. Use
  ``--run-id`` for a fresh run.
- ``--kill-after N`` kills the agent process after N steps and starts it again, to watch a
  resume replay the finished steps.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..api import AgentRunManifest, AgentToolManifest, ExecRequest, ManifestError, load_manifests
from ..entrypoint import EXIT_RECOVERABLE, EXIT_SUCCEEDED, EXIT_SUSPENDED
from ..progress import read_progress, unknown_cost_note
from ..stores import default_store_url, open_store
from ..wire.providers import API_KEY_ENV


def _load(path: Path) -> tuple[AgentRunManifest, dict[str, AgentToolManifest]]:
    manifests = load_manifests(path)
    runs = [m for m in manifests if isinstance(m, AgentRunManifest)]
    if len(runs) != 1:
        raise ManifestError(f"{path}: expected exactly one AgentRun, found {len(runs)}")
    tools = {m.metadata.name: m for m in manifests if isinstance(m, AgentToolManifest)}
    return runs[0], tools


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tether run", description=__doc__.split("\n\n")[0])
    p.add_argument("manifest", type=Path)
    p.add_argument("--run-id", help="run id (default: the AgentRun's name; the same id resumes/replays)")
    p.add_argument("--store", default=None, help=f"store URL (default {default_store_url()})")
    p.add_argument("--kill-after", type=int, default=0, metavar="N", help="kill the first attempt after N steps, then resume")
    p.add_argument("--retries", type=int, default=None, help="attempts after a crash (default: spec.retries)")
    args = p.parse_args(argv)

    try:
        run, tool_manifests = _load(args.manifest)
    except (ManifestError, OSError) as e:
        print(f"tether run: {e}", file=sys.stderr)
        return 2
    spec = run.spec
    missing = [t for t in spec.tools if t not in tool_manifests]
    if missing:
        print(f"tether run: the manifest names AgentTool(s) it does not define: {', '.join(missing)}", file=sys.stderr)
        return 2
    run_id = args.run_id or run.metadata.name
    store = args.store or default_store_url()
    open_store(store)  # fail early on a bad store URL
    here = args.manifest.resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(here), os.environ.get("PYTHONPATH")])), "TETHER_PROGRESS": "1"}
    env.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

    provider = spec.model.provider
    fake = None
    if not spec.model.base_url and not os.environ.get(API_KEY_ENV[provider]):
        script = args.manifest.with_name(f"{args.manifest.stem}.script.yaml")
        if not script.exists():
            print(f"tether run: no {API_KEY_ENV[provider]} set and no fake-provider script at {script}", file=sys.stderr)
            return 2
        from ..testing.fake_provider import FakeProvider
        from ..testing.script import Script

        fake = FakeProvider(Script.load(script), latency=0.2).start()
        spec = spec.model_copy(update={"model": spec.model.model_copy(update={"base_url": fake.base_url(provider)})})
        env[API_KEY_ENV[provider]] = "fake-key-no-real-model"
        print(f"No {API_KEY_ENV[provider]} set: using Tether's fake {provider} provider at {fake.url}")
        print(f"  scripted by {script.name}; no real model is called and nothing is billed.\n")

    request = ExecRequest(
        run_id=run_id,
        namespace=run.metadata.namespace or "default",
        name=run.metadata.name,
        spec=spec,
        tools={n: t.spec for n, t in tool_manifests.items()},
    )
    retries = spec.retries if args.retries is None else args.retries
    print(f"AgentRun {run.metadata.name} ({spec.framework}, {spec.model.name}) run id {run_id}, store {store}")
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            f.write(request.model_dump_json(by_alias=True))
        code = _attempts(f.name, store, env, args.kill_after, retries)
    finally:
        os.unlink(f.name)
        if fake is not None:
            fake.stop()
    _summary(store, run_id, code)
    return code


def _attempts(request_file: str, store: str, env: dict, kill_after: int, retries: int) -> int:
    code = EXIT_RECOVERABLE
    for attempt in range(1, retries + 2):
        attempt_env = dict(env)
        if kill_after and attempt == 1:
            attempt_env["TETHER_KILL_AFTER_STEP"] = str(kill_after)
        print(f"attempt {attempt}:")
        proc = subprocess.run(
            [sys.executable, "-m", "tether", "exec", request_file, "--store", store], env=attempt_env, stdout=subprocess.PIPE, text=True
        )
        lines = proc.stdout.splitlines()
        for line in lines[:-1] if proc.returncode >= 0 else lines:
            print(line)
        code = proc.returncode
        if code < 0:
            print(f"  the agent process died (signal {-code}); starting it again — finished steps will replay\n")
            continue
        if code == EXIT_RECOVERABLE:
            print("  recoverable failure; starting again\n")
            continue
        return code
    return code


def _summary(store: str, run_id: str, code: int) -> None:
    progress = read_progress(open_store(store), run_id) or {}
    steps, usage = progress.get("steps", {}), progress.get("usage", {})
    print()
    if code == EXIT_SUCCEEDED:
        print("Answer:\n  " + (progress.get("result") or "").replace("\n", "\n  "))
    elif code == EXIT_SUSPENDED:
        for a in progress.get("approvals", []):
            if not a.get("decision"):
                print(f"Waiting for approval {a['id']}: {a['prompt']}")
                print(f"  approve:  tether approve {run_id} {a['id']} --yes")
                print(f"  decline:  tether approve {run_id} {a['id']} --no --reason '...'")
                print("  then run the same command again to continue (finished steps replay).")
    else:
        print(f"Failed: {progress.get('error') or f'exit code {code}'}")
    if steps:
        print(
            f"\nSummary (last attempt {progress.get('attempt')}): model turns {steps['modelLive']} live / {steps['modelReplayed']} replayed, "
            f"tools {steps['toolLive']} live / {steps['toolReplayed']} replayed; "
            f"tokens {usage.get('liveTokens', 0)} live / {usage.get('replayedTokens', 0)} replayed; "
            f"cost ${usage.get('liveCostUSD', 0):.6f}, saved by replay ${usage.get('savedUSD', 0):.6f}{unknown_cost_note(usage)}"
        )
    print(json.dumps({"run_id": run_id, "exit_code": code, "phase": progress.get("phase")}))
