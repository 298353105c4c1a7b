"""Packages a user can install: scripts/build-dist.sh builds a wheel and an sdist of every
distribution, all at one version; installed from those wheels into a clean venv (no checkout on
the path), a plain install carries nothing the framework imports on its own, `tether run` says
which extra it needs, and with it runs a bring-your-own agent against the fake provider. A
version or a pin that drifts stops the build."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PROJECTS = [REPO / "runtime", REPO / "testing", REPO / "operator", *sorted(p.parent for p in REPO.glob("adapters/*/pyproject.toml"))]

#: What the OpenAI SDK imports on its own where it finds it installed (aiohttp: its optional
#: transport; rich and pygments: httpx's CLI) and Flyte: never in a plain install. (click and
#: opentelemetry-api are the Agents SDK's own dependencies: benchmarks/import_time.py compares
#: with the framework installed alone.)
FRAMEWORK_OPTIONAL = ("aiohttp", "rich", "pygments", "flyte")

BYO_AGENT = """
from agents import Agent
from tether import tool
from tether_openai.adapter import function_tool


@tool
def exchange_rate(currency: str) -> str:
    \"\"\"The exchange rate of a currency to USD.\"\"\"
    return f"1 {currency} = 1.08 USD"


agent = Agent(name="rates", instructions="Answer with the rate.", model="gpt-4o-mini", tools=[function_tool(exchange_rate)])
"""


def _clean_env() -> dict[str, str]:
    """The user's environment, without this checkout's venv or paths."""
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "TETHER_ENV", "TETHER_COMMAND", "TETHER_STORE")
    return {k: v for k, v in os.environ.items() if k not in drop and not k.endswith("_API_KEY")}


def _pyproject(project: Path) -> dict:
    return tomllib.loads((project / "pyproject.toml").read_text())["project"]


def test_every_distribution_is_at_the_runtimes_version_and_pins_the_others_at_it() -> None:
    version = _pyproject(REPO / "runtime")["version"]
    names = {_pyproject(p)["name"] for p in PROJECTS}
    for project in PROJECTS:
        meta = _pyproject(project)
        assert meta["version"] == version, f"{project.name}: {meta['version']} != {version}"
        ours = [d for d in meta.get("dependencies", []) if re.split(r"[\[=<>~! ]", d)[0] in names]  # tether[cli]==V too
        assert all(d.endswith(f"=={version}") for d in ours), (project.name, ours)


def test_a_drifted_version_stops_the_build(tmp_path: Path) -> None:
    copy = tmp_path / "checkout"
    for project in PROJECTS:
        (copy / project.relative_to(REPO)).mkdir(parents=True)
        shutil.copy(project / "pyproject.toml", copy / project.relative_to(REPO) / "pyproject.toml")
    (copy / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "build-dist.sh", copy / "scripts" / "build-dist.sh")
    openai = copy / "adapters" / "openai" / "pyproject.toml"
    openai.write_text(openai.read_text().replace('version = "', 'version = "9', 1))
    proc = subprocess.run(
        ["bash", str(copy / "scripts" / "build-dist.sh"), str(tmp_path / "dist")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1
    assert "adapters/openai/pyproject.toml: version 9" in proc.stderr and "not in step" in proc.stderr
    assert not list((tmp_path / "dist").glob("*"))  # nothing built


def test_the_built_wheels_install_into_a_clean_venv_and_run_a_bring_your_own_agent(tmp_path: Path) -> None:
    env = _clean_env()
    built = subprocess.run(
        ["scripts/build-dist.sh", str(tmp_path / "dist")], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stderr[-3000:]
    version = _pyproject(REPO / "runtime")["version"]
    files = sorted(f.name for f in (tmp_path / "dist").iterdir())
    for project in PROJECTS:
        stem = _pyproject(project)["name"].replace("-", "_")
        assert f"{stem}-{version}-py3-none-any.whl" in files and f"{stem}-{version}.tar.gz" in files, (stem, files)

    # A new project of the user's, outside the checkout: a venv with the three wheels and their
    # dependencies (at the versions the openai environment pins, so the install is the tested one).
    work = tmp_path / "my-project"
    work.mkdir()
    venv = work / ".venv"
    subprocess.run(["uv", "venv", "-q", "-p", "3.11", str(venv)], env=env, check=True, timeout=120)
    pins = [
        line for line in (REPO / "envs" / "openai.txt").read_text().splitlines() if "==" in line and not line.startswith((" ", "#", "-"))
    ]
    (work / "constraints.txt").write_text("\n".join(pins) + "\n")
    wheel = {name: str(tmp_path / "dist" / f"{name}-{version}-py3-none-any.whl") for name in ("tether", "tether_testing", "tether_openai")}

    def install(*packages: str) -> None:
        done = subprocess.run(
            ["uv", "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "-c", "constraints.txt", *packages],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]

    # First the plain install (`pip install tether-openai`): what the agent's process needs and
    # nothing the framework would import on its own because it is there; an MCP URL (the proxy
    # started) and the in-process MCP client included.
    install(wheel["tether"], wheel["tether_openai"])
    mcp = "tether.mcp_url('https://mcp.example/mcp', name='shop'); tether.mcp_http_client()"
    imported = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            f"import sys, agents, tether, tether_openai; {mcp}; print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(FRAMEWORK_OPTIONAL)}))",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert imported.returncode == 0 and imported.stdout == "[]\n", imported.stdout + imported.stderr
    (work / "rates.yaml").write_text("kind: AgentRun\n")
    refused = subprocess.run([str(venv / "bin" / "tether"), "run", "rates.yaml"], cwd=work, env=env, capture_output=True, text=True)
    assert refused.returncode == 2 and "tether run needs flyte" in refused.stderr and "pip install 'tether[cli]'" in refused.stderr, (
        refused.stderr
    )
    assert "Traceback" not in refused.stderr

    # Then the CLI's extra and the fake provider, as the README's Install says.
    install(f"{wheel['tether']}[cli]", wheel["tether_testing"], wheel["tether_openai"])
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import tether, tether.testing, tether_openai; print(tether.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert where.returncode == 0 and Path(where.stdout.strip()).is_relative_to(venv), where.stdout + where.stderr  # not the checkout's
    tether = str(venv / "bin" / "tether")
    assert subprocess.run([tether, "--version"], env=env, capture_output=True, text=True).stdout == f"tether {version}\n"

    (work / "rates.py").write_text(BYO_AGENT)
    script = {
        "conversations": [
            {"match": "", "turns": [{"tool_calls": [{"name": "exchange_rate", "arguments": {"currency": "EUR"}}]}, {"text": "1.08 USD"}]}
        ]
    }
    (work / "rates.script.yaml").write_text(yaml.safe_dump(script))
    run = {
        "apiVersion": "tether.dev/v1alpha1",
        "kind": "AgentRun",
        "metadata": {"name": "rates"},
        "spec": {"framework": "openai", "model": {"name": "gpt-4o-mini", "provider": "openai"}, "agent": "rates:agent", "input": "EUR?"},
    }
    (work / "rates.yaml").write_text(yaml.safe_dump(run, sort_keys=False))
    proc = subprocess.run(
        [tether, "run", "rates.yaml", "--store", str(work / "store")],
        cwd=work,
        env={**env, "OPENAI_AGENTS_DISABLE_TRACING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "using Tether's fake openai provider" in proc.stdout
    assert "live      tool  exchange_rate" in proc.stdout and "Answer:\n  1.08 USD" in proc.stdout
