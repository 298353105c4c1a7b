"""The runner pod's path without a cluster: ``python -m tether exec`` from process start to the
first model request, and a retry's process start to its first replayed turn, phase by phase.

    $(scripts/env.sh openai)/bin/python benchmarks/pod_start.py [--framework openai] [--repeat 3] [--s3] [--baseline REF]
    $(scripts/env.sh langgraph)/bin/python benchmarks/pod_start.py --framework langgraph

The command the Kubernetes executor's pod runs (`python -m tether exec REQUEST --progress --store
URL`, `operator/.../executors/pods.py`), on an AgentRun request against the fake provider: turn 1
asks for a tool (`reference_tools:get_weather`, ~5 ms), turn 2 answers. Each repeat runs, as
fresh processes, interleaved so the machine's load moves every figure alike:

- **attempt**: killed (`$TETHER_KILL_AFTER_STEP=1`) once turn 1 is recorded; wall time from its
  spawn to the fake provider's receipt of its first request (the ledger's clock), and its CPU time
  (user + system, `wait4`: what it cost apart from waiting for a core on a loaded machine);
- **retry**: the same command, killed after its first step: wall time from its spawn to that step's
  line (turn 1, replayed), and its CPU time;
- **standby**: the same retry as `spec.standby`'s pod runs it (`--standby FILE`): started, ready
  once it stands by (imports and the adapter's warm-up done), then told to go (FILE written):
  wall and CPU time from the go to its first replayed turn — the part of a standby's resume that
  is the runtime's (the kubelet's update of the go file, the operator and the status are not here:
  kind_pods.py --standby);
- the **floors** it is made of, wall and CPU: the interpreter alone (`python -c pass`); the
  interpreter and the runtime's imports on that path (`tether exec`'s module, Flyte,
  `tether.entrypoint`, the stores); those and the framework adapter loaded (`load_adapter`: the
  framework's imports). The floors import with the collector off, as `tether exec` does (a
  `--baseline` older than that paid for collections during its imports: its `to_first_request`
  holds them).

Phases (CPU ms, differences of the medians): `interpreter`, `runtime_imports`,
`framework_imports`, `to_first_request` (what is left: Flyte's init and first local run, the
store's reads, the attempt claim, the adapter building the agent, the request), and for the retry
`to_first_replayed_turn`. `--no-bytecode` repeats everything with no cached bytecode (an empty
`PYTHONPYCACHEPREFIX`, not written: what a read-only image without `.pyc` files pays on every
start; the runtime image byte-compiles what it installs and the base's standard library).
`--baseline REF` also runs the runtime and adapters of git REF (extracted to a temporary directory,
first on `PYTHONPATH`) in the same interleaved loop: `ratio` = this tree / REF. One more attempt
under `-X importtime` lists the slowest imports (self time, by top-level package). Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import save  # noqa: E402

SCRIPT = {
    "conversations": [
        {
            "match": "",
            "turns": [
                {"tool_calls": [{"name": "get-weather", "arguments": {"city": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Done:"},
            ],
        }
    ]
}

# The floors import with the collector off, as `tether exec` does until its framework is imported.
RUNTIME_IMPORTS = "import gc\ngc.disable()\nimport tether.commands.exec, flyte, tether.entrypoint, tether.progress, tether.stores"


def request(run_id: str, framework: str, base_url: str) -> dict:
    return {
        "runId": run_id,
        "namespace": "default",
        "name": "bench",
        "spec": {
            "framework": framework,
            "model": {"name": "gpt-4o-mini", "provider": "openai", "baseURL": base_url},
            "input": "What is the weather in Paris?",
            "tools": ["get-weather"],
        },
        "tools": {
            "get-weather": {"description": "Current weather in a city.", "implementation": "reference_tools:get_weather", "cache": "off"}
        },
    }


def median(values: list[float]) -> float:
    return round(float(statistics.median(values)), 1)


def extract(ref: str, into: Path) -> list[str]:
    """The runtime and the adapter(s) of git ``ref``, as PYTHONPATH entries."""
    paths = ["runtime/src", *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "adapters").glob("*/src")))]
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, *paths], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return [str(into / p) for p in paths if (into / p).exists()]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--framework", default="openai", help="the adapter of this environment to run (openai, langgraph, ...)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--s3", action="store_true", help="a moto S3 store on loopback instead of a local directory")
    p.add_argument("--no-bytecode", action="store_true", help="also time the attempt with no cached bytecode")
    p.add_argument("--baseline", metavar="REF", help="also time git REF's runtime and adapters, interleaved")
    args = p.parse_args()
    from tether.testing.fake_provider import FakeProvider
    from tether.testing.script import Script

    work = Path(tempfile.mkdtemp(prefix="tether-pod-start-"))
    tool_log = work / "tools.jsonl"
    tool_log.touch()
    base_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "TETHER_TOOL_MODULES": "reference_tools",
        "TETHER_TOOL_LOG": str(tool_log),
        "TETHER_BENCH_SCALE": "0.001",
        "OPENAI_API_KEY": "sk-bench",
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
    }
    variants: dict[str, dict[str, str]] = {"tree": base_env}
    if args.baseline:
        paths = extract(args.baseline, work / "baseline")
        variants["baseline"] = {**base_env, "PYTHONPATH": os.pathsep.join([*paths, base_env["PYTHONPATH"]])}
    if args.no_bytecode:
        (work / "pycache").mkdir()
        variants["no_bytecode"] = {**base_env, "PYTHONPYCACHEPREFIX": str(work / "pycache"), "PYTHONDONTWRITEBYTECODE": "1"}

    with ExitStack() as stack:
        store = str(work / "store")
        if args.s3:
            from tests.support.s3 import new_bucket, s3_server, set_aws_env

            set_aws_env()
            endpoint = stack.enter_context(s3_server())
            store = f"s3://{new_bucket(endpoint)}/bench?endpoint_url={endpoint}"
        fake = stack.enter_context(FakeProvider(Script.from_dict(SCRIPT)))
        base_url = fake.base_url("openai")

        errors = work / "stderr"

        def spawn(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.Popen]:
            # stderr to a file: `-X importtime` writes more than a pipe holds while stdout is read
            with errors.open("w") as err:
                return time.time(), subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=err, text=True)

        def ended(proc: subprocess.Popen) -> tuple[int, str, float]:
            """Exit code, stderr and CPU time (user + system, ms) of the process: CPU time is
            what it cost apart from waiting for a core on a loaded machine."""
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = code = os.waitstatus_to_exitcode(status)
            assert proc.stdout is not None
            proc.stdout.read()
            return code, errors.read_text(), 1000 * (usage.ru_utime + usage.ru_stime)

        def floor(code: str, env: dict[str, str]) -> tuple[float, float]:
            started, proc = spawn([sys.executable, "-c", code], env)
            status, err, cpu = ended(proc)
            assert status == 0, err[-3000:]
            return 1000 * (time.time() - started), cpu

        counter = iter(range(1_000_000))

        def cpu_so_far(pid: int) -> float:
            """CPU time (user + system, ms) of a running process (/proc, clock ticks)."""
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return 1000 * (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        def standby(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
            """`tether exec --standby FILE` (a standby pod's runtime): started, waited for until it
            stands by (imports and warm-up done), then told to go; wall time and CPU time from the
            go to its first (replayed) step."""
            go = work / "go"
            go.write_text("")
            started, proc = spawn([*cmd, "--standby", str(go)], env)
            while "standing by" not in errors.read_text():
                assert proc.poll() is None, errors.read_text()[-3000:]
                time.sleep(0.01)
            ready = 1000 * (time.time() - started)
            before = cpu_so_far(proc.pid)
            told = time.time()
            go.write_text(f"{told:.3f}")
            assert proc.stdout is not None
            first_line = proc.stdout.readline()
            replayed = 1000 * (time.time() - told)
            status, err, cpu = ended(proc)
            assert status == -9 and "replay" in first_line, (first_line, err[-3000:])
            return {"standby_ready": ready, "standby_go_to_replayed_turn": replayed, "standby_go_to_replayed_turn_cpu": cpu - before}

        def attempt(env: dict[str, str], importtime: bool = False, with_standby: bool = False) -> dict[str, float]:
            """Both processes are killed right after their first step (`$TETHER_KILL_AFTER_STEP`):
            their CPU time is what it took them to get there. `with_standby`: a third process, a
            standby, replays the same step once told to go."""
            run_id = f"bench-{next(counter)}"
            path = work / f"{run_id}.json"
            path.write_text(json.dumps(request(run_id, args.framework, base_url)))
            cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "tether", "exec", str(path), "--progress"]
            cmd += ["--store", store]
            kill = {**env, "TETHER_KILL_AFTER_STEP": "1"}
            seen = len(fake.ledger)
            started, proc = spawn(cmd, kill)
            status, err, first_cpu = ended(proc)
            assert status == -9, err[-3000:]
            first_request = 1000 * (fake.ledger[seen].time - started)
            started, proc = spawn(cmd, kill)
            assert proc.stdout is not None
            first_line = proc.stdout.readline()
            replayed = 1000 * (time.time() - started)
            status, err, replay_cpu = ended(proc)
            assert status == -9 and "replay" in first_line, (first_line, err[-3000:])
            assert fake.live_calls() == seen + 1, "the retry called the model"
            imports.append(err)
            timed = {
                "first_request": first_request,
                "first_request_cpu": first_cpu,
                "first_replayed_turn": replayed,
                "first_replayed_turn_cpu": replay_cpu,
            }
            if with_standby:
                timed |= standby(cmd, kill)
                assert fake.live_calls() == seen + 1, "the standby called the model"
            return timed

        imports: list[str] = []
        framework_imports = f"{RUNTIME_IMPORTS}\nfrom tether.agent import load_adapter\nload_adapter({args.framework!r})"
        rows: dict[str, dict[str, list[float]]] = {v: {} for v in variants}
        for _ in range(args.repeat):
            for variant, env in variants.items():
                row = rows[variant]
                timed = attempt(env, with_standby=variant == "tree")
                for key, code in (("interpreter", "pass"), ("runtime_imports", RUNTIME_IMPORTS), ("framework_imports", framework_imports)):
                    timed[key], timed[f"{key}_cpu"] = floor(code, env)
                for key, value in timed.items():
                    row.setdefault(key, []).append(round(value, 1))
        attempt(base_env, importtime=True)
        slowest = slowest_imports(imports[-1])

    figures: dict = {"framework": args.framework, "repeat": args.repeat, "store": "s3" if args.s3 else "local"}
    for variant, row in rows.items():
        m = {k: median(v) for k, v in row.items()}
        figures[variant] = {
            "first_request_ms": m["first_request"],
            "first_replayed_turn_ms": m["first_replayed_turn"],
            "first_request_cpu_ms": m["first_request_cpu"],
            "first_replayed_turn_cpu_ms": m["first_replayed_turn_cpu"],
            # CPU time by phase: differences of the medians (floors: processes of their own)
            "phases_cpu_ms": {
                "interpreter": m["interpreter_cpu"],
                "runtime_imports": round(m["runtime_imports_cpu"] - m["interpreter_cpu"], 1),
                "framework_imports": round(m["framework_imports_cpu"] - m["runtime_imports_cpu"], 1),
                "to_first_request": round(m["first_request_cpu"] - m["framework_imports_cpu"], 1),
                "to_first_replayed_turn": round(m["first_replayed_turn_cpu"] - m["framework_imports_cpu"], 1),
            },
        }
        if "standby_ready" in m:  # spec.standby's runtime: the same replay in a process started before it was needed
            figures[variant]["standby"] = {
                "ready_ms": m["standby_ready"],
                "go_to_first_replayed_turn_ms": m["standby_go_to_replayed_turn"],
                "go_to_first_replayed_turn_cpu_ms": m["standby_go_to_replayed_turn_cpu"],
            }
    keys = ("first_request_ms", "first_replayed_turn_ms", "first_request_cpu_ms", "first_replayed_turn_cpu_ms")
    if "baseline" in figures:
        figures["baseline"]["ref"] = args.baseline
        figures["ratio"] = {k: round(figures["tree"][k] / figures["baseline"][k], 3) for k in keys}
    if "no_bytecode" in figures:
        figures["no_bytecode_ratio"] = {k: round(figures["no_bytecode"][k] / figures["tree"][k], 3) for k in keys}
    figures["slowest_imports_ms"] = slowest

    for variant in variants:
        f = figures[variant]
        phases = ", ".join(f"{k} {v:.0f}" for k, v in f["phases_cpu_ms"].items())
        print(
            f"{variant}: first model request {f['first_request_ms']:.0f} ms (CPU {f['first_request_cpu_ms']:.0f}), "
            f"first replayed turn {f['first_replayed_turn_ms']:.0f} ms (CPU {f['first_replayed_turn_cpu_ms']:.0f}); CPU ms by phase: {phases}"
        )
        if sb := f.get("standby"):
            print(
                f"{variant}, standby: ready {sb['ready_ms']:.0f} ms after its start; go → first replayed turn "
                f"{sb['go_to_first_replayed_turn_ms']:.0f} ms (CPU {sb['go_to_first_replayed_turn_cpu_ms']:.0f})"
            )
    for name in ("ratio", "no_bytecode_ratio"):
        if name in figures:
            print(f"{name}: " + ", ".join(f"{k} ×{v}" for k, v in figures[name].items()))
    print("slowest imports (self ms, -X importtime): " + ", ".join(f"{k} {v}" for k, v in slowest.items()))
    save(f"pod_start-{args.framework}", figures)
    print(json.dumps(figures))


def slowest_imports(stderr: str, top: int = 8) -> dict[str, float]:
    """The top-level packages with the most import self time (``-X importtime``), in ms."""
    totals: dict[str, float] = {}
    for m in re.finditer(r"^import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", stderr, re.M):
        package = m.group(2).split(".")[0]
        totals[package] = totals.get(package, 0.0) + int(m.group(1)) / 1000
    return {k: round(v, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])[:top]}


if __name__ == "__main__":
    main()
