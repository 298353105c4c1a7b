"""`tether image build` without Docker: the build context it writes (``--context DIR``) and the
arguments it refuses, on real files (this checkout, real wheels built with uv, the examples' tool
module). The image itself is built from this context by the kind e2e (tests/e2e/build/py-images.sh).

    a checkout's context: the framework's pins, the runtime, tether-testing and the environment's
    adapters only, no tests or caches, a Dockerfile defaulting to that framework (and base image)
    your tool modules land in site-packages declared in tether.tools, as the runtime reads them
    a project folder is installed as a package; the tar streamed to docker equals the written folder
    built from wheels: Tether's wheels and the requirements at their version, the checkout's pins
    every bad argument exits 2 naming it and what to pass instead
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tether.image import HELM_TEST_TOOL, build_context

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_TOOLS = REPO / "examples" / "openai" / "example_tools.py"


def image_build(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", "image", "build", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_a_checkouts_context_holds_the_frameworks_pins_and_packages_and_your_tools(tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    proc = image_build("--framework", "deepagents", "--tools-from", str(REPO / "examples" / "deepagents"), "--context", str(ctx))
    assert proc.returncode == 0, proc.stderr
    assert "tether-runtime-deepagents:0.1.0: deepagents from the checkout" in proc.stderr
    assert "tool modules example_tools (declared in the image" in proc.stderr and "tools.allowedModules" in proc.stderr
    assert f"docker build --tag tether-runtime-deepagents:0.1.0 {ctx}" in proc.stderr
    got = files(ctx)
    assert (ctx / "envs" / "deepagents.txt").read_bytes() == (REPO / "envs" / "deepagents.txt").read_bytes()
    assert {f for f in got if f.startswith("envs/")} == {"envs/deepagents.txt"}
    # deepagents runs on tether-langgraph and tether-langchain (its lock's -e lines); no other adapter
    assert {f.split("/")[2] for f in got if f.startswith("src/adapters/")} == {"deepagents", "langchain", "langgraph"}
    assert "src/runtime/pyproject.toml" in got and "src/testing/src/tether/testing/helm_test.py" in got
    assert "src/runtime/src/tether/image/Dockerfile" in got
    assert not [f for f in got if "/tests/" in f or "__pycache__" in f or ".egg-info" in f], "tests and caches stay out"
    assert not [f for f in got if f.startswith("wheels/")]  # no --wheels: the build uses the index
    # examples/deepagents/example_tools.py is a link to the openai one: the module's text is copied
    assert (ctx / "tools" / "site-packages" / "example_tools.py").read_bytes() == EXAMPLE_TOOLS.read_bytes()
    assert (ctx / "tools" / "modules.txt").read_text().split() == ["example_tools", HELM_TEST_TOOL]
    dockerfile = (ctx / "Dockerfile").read_text()
    assert "\nARG ADAPTER=deepagents\n" in dockerfile and "\nARG BASE=python:3.11-slim\n" in dockerfile


def test_your_tool_modules_are_declared_as_the_runtime_reads_them(tmp_path: Path) -> None:
    """The image's site-packages, simulated: the copied modules and dist-info on sys.path are what
    tether.tools allows with no TETHER_TOOL_MODULES (the chart's tools.allowedModules: [])."""
    mine = tmp_path / "mine"
    (mine / "shop").mkdir(parents=True)
    (mine / "shop" / "__init__.py").write_text("def refund(order: str) -> str:\n    return 'refunded ' + order\n")
    (mine / "shop" / "build").mkdir()  # a subpackage named like build output is still the package's
    (mine / "shop" / "build" / "__init__.py").write_text("")
    (mine / "shop" / "__pycache__").mkdir()
    (mine / "shop" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"")
    (mine / "rates.py").write_text("def rate(c: str) -> str:\n    return '1.08'\n")
    (mine / "notes.txt").write_text("not a module")
    ctx = build_context("openai", checkout=REPO, tools_from=[mine, EXAMPLE_TOOLS])
    assert ctx.tools == ("example_tools", "rates", "shop")
    out = tmp_path / "ctx"
    ctx.write(out)
    site = out / "tools" / "site-packages"
    assert files(site) >= {"shop/__init__.py", "shop/build/__init__.py", "rates.py", "example_tools.py"}
    assert "notes.txt" not in files(site) and not [f for f in files(site) if "__pycache__" in f]
    probe = (
        "import sys; from tether.tools import allowed_tool_modules, probe_implementation as p; "
        "print(','.join(allowed_tool_modules({}))); print(p('shop:refund') or 'ok'); print(p('json:dumps'))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], env={"PYTHONPATH": str(site)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    allowed, shop, stdlib = proc.stdout.splitlines()
    assert {"example_tools", "rates", "shop", HELM_TEST_TOOL} <= set(allowed.split(","))
    assert shop == "ok"
    assert "standard library" in stdlib  # declaring never opens the standard library


def test_a_tool_project_is_installed_as_a_package(tmp_path: Path) -> None:
    project = tmp_path / "acme-tools"
    (project / "src" / "acme").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[project]\nname = "acme-tools"\nversion = "1"\n')
    (project / "src" / "acme" / "__init__.py").write_text("")
    (project / "tests").mkdir()
    (project / "tests" / "test_x.py").write_text("")
    ctx = build_context("openai", checkout=REPO, tools_from=[project])
    assert ctx.tool_packages == ("acme-tools",) and ctx.tools == ()
    assert {k for k in ctx.files if k.startswith("tools/packages/")} == {
        "tools/packages/acme-tools/pyproject.toml",
        "tools/packages/acme-tools/src/acme/__init__.py",
    }


def test_the_tar_streamed_to_docker_is_the_written_context(tmp_path: Path) -> None:
    ctx = build_context("openai", checkout=REPO, tools_from=[EXAMPLE_TOOLS], base_image="tether-e2e/python-base:x")
    ctx.write(tmp_path / "dir")
    buf = io.BytesIO()
    ctx.tar(buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as archive:
        archive.extractall(tmp_path / "tar", filter="data")
    assert files(tmp_path / "tar") == files(tmp_path / "dir")
    for name in files(tmp_path / "dir"):
        assert (tmp_path / "tar" / name).read_bytes() == (tmp_path / "dir" / name).read_bytes(), name
    assert "\nARG BASE=tether-e2e/python-base:x\n" in (tmp_path / "dir" / "Dockerfile").read_text()


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real wheels of tether, tether-testing and tether-openai (what scripts/build-dist.sh makes)."""
    out = tmp_path_factory.mktemp("dist")
    for project in ("runtime", "testing", "adapters/openai"):
        subprocess.run(["uv", "build", "-q", "--wheel", str(REPO / project), "-o", str(out)], check=True, timeout=300)
    return out


def test_built_from_wheels_the_context_holds_them_and_their_requirements(tmp_path: Path, dist: Path) -> None:
    wheels = tmp_path / "wheels"  # third-party wheels for an offline build (any .whl: copied as they are)
    wheels.mkdir()
    (wheels / "six-1.17.0-py2.py3-none-any.whl").write_bytes(b"a wheel")
    ctx = tmp_path / "ctx"
    proc = image_build(
        "--framework", "openai", "--dist", str(dist), "--wheels", str(wheels), "--tag", "r.example/rt:1", "--context", str(ctx)
    )
    assert proc.returncode == 0, proc.stderr
    assert f"r.example/rt:1: openai from the wheels in {dist}" in proc.stderr
    got = files(ctx)
    assert {f for f in got if f.startswith("src/")} == {
        "src/requirements.txt",
        "src/tether-0.1.0-py3-none-any.whl",
        "src/tether_testing-0.1.0-py3-none-any.whl",
        "src/tether_openai-0.1.0-py3-none-any.whl",
    }
    assert (ctx / "src" / "requirements.txt").read_text().split() == [
        "tether[s3,otel,cli]==0.1.0",  # tether exec needs the cli extra (Flyte)
        "tether-testing==0.1.0",
        "tether-openai==0.1.0",
    ]
    assert (ctx / "envs" / "openai.txt").read_bytes() == (REPO / "envs" / "openai.txt").read_bytes()  # the checkout's pins
    assert "wheels/six-1.17.0-py2.py3-none-any.whl" in got
    # Without a checkout (a project that installed the wheels): no pins, uv resolves at build time.
    alone = build_context("openai", dist=dist)
    assert alone.files["envs/openai.txt"].startswith(b"# No pins")  # type: ignore[union-attr]


def test_a_missing_adapter_wheel_is_named(dist: Path) -> None:
    proc = image_build("--framework", "langgraph", "--dist", str(dist), "--context", "/nonexistent/never-written")
    assert proc.returncode == 2
    assert f"--dist {dist}: no wheel of tether-langgraph 0.1.0 there (scripts/build-dist.sh" in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--framework", "autogen"], "--framework 'autogen': not one of claude, crewai, deepagents,"),
        (["--framework", "core"], "--framework 'core': not one of"),
        (["--framework", "openai", "--tools-from", "no/such/tools"], "--tools-from no/such/tools: no such file or folder"),
        (["--framework", "openai", "--tools-from", "charts"], "--tools-from charts: no Python module there"),
        (["--framework", "openai", "--tools-from", "examples/openai/weather.yaml"], "no Python module there"),
        (["--framework", "openai", "--dist", "charts"], "--dist charts: no tether wheel there (scripts/build-dist.sh"),
        (["--framework", "openai", "--wheels", "charts"], "--wheels charts: no .whl files there"),
        (["--framework", "openai", "--checkout", "charts"], "--checkout charts: not a Tether checkout"),
        (["--framework", "openai", "--context", "charts"], "--context charts: not empty"),
        ([], "the following arguments are required: --framework"),
    ],
)
def test_bad_arguments_exit_2_naming_what_to_pass(args: list[str], message: str) -> None:
    proc = image_build(*args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_tool_modules_that_would_shadow_the_image_are_refused(tmp_path: Path) -> None:
    for name in ("json", "tether", "my-tools"):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.py").write_text("")
        proc = image_build("--framework", "openai", "--tools-from", str(tmp_path / name / f"{name}.py"), "--context", str(tmp_path / "c"))
        assert proc.returncode == 2, proc.stderr
        assert {"json": "module json would shadow the standard library", "tether": "module tether would shadow tether",
                "my-tools": "'my-tools' is not a Python module name"}[name] in proc.stderr  # fmt: skip
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "rates.py").write_text("")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "rates.py").write_text("")
    proc = image_build(
        "--framework", "openai", "--tools-from", str(tmp_path / "a"), "--tools-from", str(tmp_path / "b"), "--context", str(tmp_path / "c")
    )
    assert proc.returncode == 2 and "module rates is already given by" in proc.stderr
    assert not (tmp_path / "c").exists()  # nothing written for a refused build


def test_outside_a_checkout_without_wheels_it_says_what_to_pass(tmp_path: Path) -> None:
    """An installed tether (a copy of the package, no checkout above it) run in a folder that is
    no checkout either."""
    site = tmp_path / "site-packages"
    shutil.copytree(REPO / "runtime" / "src" / "tether", site / "tether", ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "project"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "tether", "image", "build", "--framework", "openai"],
        cwd=work, env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "no Tether checkout here: run it from a checkout (./tether image build), pass --checkout DIR, or --dist DIR" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "tether", "image", "build", "--framework", "openai", "--checkout", str(REPO), "--context", "ctx"],
        cwd=work, env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (work / "ctx" / "envs" / "openai.txt").is_file()
