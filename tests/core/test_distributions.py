"""The runtime wheel ships no test doubles: ``tether.testing`` is the tether-testing distribution
(testing/), which ships only ``tether/testing/`` and is found through the ``tether`` package path."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import tether
import tether.testing

REPO = Path(__file__).resolve().parents[2]


def _wheel(project: str, out: Path) -> list[str]:
    uv = shutil.which("uv")
    assert uv, "uv is needed to build the wheels (scripts/env.sh installs it)"
    proc = subprocess.run(
        [uv, "build", "-q", "--offline", "--wheel", project, "-o", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_runtime_wheel_has_no_testing_package(tmp_path: Path) -> None:
    names = _wheel("runtime", tmp_path / "runtime")
    assert "tether/__init__.py" in names and "tether/run.py" in names
    assert not [n for n in names if n.startswith("tether/testing/")]
    # The CRD generator is the operator's (the CRDs are what its chart installs): no agent image carries it.
    assert "tether/crds.py" not in names and "tether/api/agentrun.py" in names


def test_operator_wheel_ships_the_crd_generator(tmp_path: Path) -> None:
    assert "tether_operator/crds.py" in _wheel("operator", tmp_path / "operator")


def test_testing_wheel_ships_only_tether_testing(tmp_path: Path) -> None:
    names = _wheel("testing", tmp_path / "testing")
    files = [n for n in names if not n.startswith("tether_testing-")]  # the .dist-info folder
    assert "tether/testing/fake_provider.py" in files
    assert all(n.startswith("tether/testing/") for n in files), files  # never the runtime's tether/__init__.py


def test_tether_testing_is_found_in_its_own_folder() -> None:
    assert Path(tether.testing.__file__).resolve().is_relative_to(REPO / "testing")
    assert Path(tether.__file__).resolve().is_relative_to(REPO / "runtime")


def test_fake_provider_command_without_tether_testing_says_what_to_install(tmp_path: Path) -> None:
    code = "import sys; sys.modules['tether.testing'] = None; from tether.cli import main; sys.exit(main(['fake-provider', '--help']))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "tether fake-provider needs the tether-testing package (pip install tether-testing)" in proc.stderr


def test_crds_command_without_the_operator_says_what_to_install(tmp_path: Path) -> None:
    code = "import sys; sys.modules['tether_operator'] = None; from tether.cli import main; sys.exit(main(['crds', '--check']))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "tether crds needs the tether-operator package (pip install tether-operator)" in proc.stderr
