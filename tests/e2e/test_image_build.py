"""`tether image build` as a user without a checkout runs it (docs/images.md): Tether from the
wheels scripts/build-dist.sh makes, a tool project of their own (a pyproject.toml declaring its
tools) and a loose tool module, the third-party wheels given (no network in the build), FROM the
e2e's Python base. The image then holds the wheels' Tether (not a checkout's), the framework's
adapter, and every tool allowed with the chart's default tools.allowedModules: []. (The checkout
build is what run.sh build makes for every other e2e test.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.e2e.cluster import REPO

CACHE = Path(os.environ.get("TETHER_CACHE", Path.home() / ".cache" / "tether")) / "e2e"
TAG = "tether-e2e/from-wheels:test"

TOOLS = '''
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"
'''


def test_an_image_built_from_wheels_holds_their_tether_and_your_tools(tmp_path: Path) -> None:
    base = next(line.split("=", 1)[1] for line in (CACHE / "node-image.env").read_text().splitlines() if line.startswith("PYTHON_BASE="))
    dist = tmp_path / "dist"
    subprocess.run(["scripts/build-dist.sh", str(dist)], cwd=REPO, check=True, capture_output=True, timeout=900)
    project = tmp_path / "acme-tools"
    (project / "src" / "acme").mkdir(parents=True)
    (project / "src" / "acme" / "__init__.py").write_text("")
    (project / "src" / "acme" / "tools.py").write_text(TOOLS)
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling>=1.25"]\nbuild-backend = "hatchling.build"\n\n'
        '[project]\nname = "acme-tools"\nversion = "1.0"\n\n'
        '[project.entry-points."tether.tools"]\nacme = "acme.tools"\n\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["src/acme"]\n'
    )
    wheels = subprocess.run([str(REPO / "tests/e2e/build/wheels.sh"), "openai"], check=True, capture_output=True, text=True).stdout.strip()
    build = subprocess.run(
        [sys.executable, "-m", "tether", "image", "build", "--framework", "openai", "--dist", str(dist), "--wheels", wheels,
         "--tools-from", str(project), "--tools-from", str(REPO / "examples/openai/example_tools.py"),
         "--base-image", base, "--tag", TAG, "--quiet"],
        cwd=tmp_path, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout + build.stderr[-4000:]
    assert build.stdout.strip().splitlines()[-1] == TAG
    try:
        probe = (
            "import json, tether, tether.entrypoint, tether_openai, acme.tools, example_tools; from importlib.metadata import version; "
            "from tether.tools import allowed_tool_modules, probe_implementation as p; "
            "print(json.dumps({'tether': tether.__file__, 'version': version('tether'), 'allowed': allowed_tool_modules({}), "
            "'refund': p('acme.tools:refund'), 'weather': p('tether.testing.weather:get_weather'), 'uid': __import__('os').getuid()}))"
        )
        ran = subprocess.run(["docker", "run", "--rm", TAG, "python", "-c", probe], capture_output=True, text=True, timeout=300)
        assert ran.returncode == 0, ran.stderr
        found = json.loads(ran.stdout)
        assert found["tether"].startswith("/opt/tether/lib/python3.11/site-packages/tether/")  # the wheel's, installed
        assert found["version"] == (dist / next(p.name for p in dist.glob("tether-*.whl"))).name.split("-")[1]
        assert {"acme.tools", "example_tools", "tether.testing.weather"} <= set(found["allowed"])
        assert found["refund"] is None and found["weather"] is None  # importable and allowed
        assert found["uid"] == 65532
    finally:
        subprocess.run(["docker", "rmi", "-f", TAG], capture_output=True, timeout=300)
