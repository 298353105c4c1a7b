"""scripts/env.sh: a test group's venv, keyed by its lock file and checkout; venvs of deleted
checkouts are removed when a new one is built (a CI machine makes a clone per run)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_building_a_venv_removes_those_of_deleted_checkouts_only(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / "envs").mkdir()
    shutil.copy(ROOT / "scripts" / "env.sh", checkout / "scripts" / "env.sh")
    (checkout / "envs" / "tiny.txt").write_text("")  # nothing to install: the venv alone
    venvs = tmp_path / "cache" / "venvs"
    gone, live, unmarked = venvs / "core-gone", venvs / "core-live", venvs / "core-unmarked"
    for venv, owner in ((gone, tmp_path / "deleted-clone"), (live, checkout), (unmarked, None)):
        venv.mkdir(parents=True)
        if owner is not None:
            (venv / ".checkout").write_text(f"{owner}\n")
    (venvs / "core-gone.lock").touch()

    def env_sh() -> Path:
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TETHER_CACHE": str(tmp_path / "cache")}
        done = subprocess.run(["bash", str(checkout / "scripts" / "env.sh"), "tiny"], env=env, capture_output=True, text=True, check=True)
        return Path(done.stdout.strip())

    venv = env_sh()
    assert venv.parent == venvs and venv.name.startswith("tiny-")
    assert (venv / ".complete").exists() and (venv / ".checkout").read_text().strip() == str(checkout)
    assert not gone.exists() and not (venvs / "core-gone.lock").exists()
    assert live.exists() and unmarked.exists()  # a live checkout's, and one that names none
    (venv / "built-once").touch()
    assert env_sh() == venv and (venv / "built-once").exists()  # reused, not rebuilt


def test_a_build_says_what_it_installs_as_it_goes(tmp_path):
    """The first `tether` call of a checkout builds an environment (about a minute cold): it says
    so at once, naming the packages, and names each one installed (read through a pipe, as it
    comes: the first line arrives before the install has ended)."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / "envs").mkdir()
    shutil.copy(ROOT / "scripts" / "env.sh", checkout / "scripts" / "env.sh")
    (checkout / "envs" / "tiny.in").write_text("# a tiny environment\nsix==1.17.0\n")
    (checkout / "envs" / "tiny.txt").write_text("six==1.17.0\n    # via -r envs/tiny.in\n")
    env = {**os.environ, "TETHER_CACHE": str(tmp_path / "cache")}  # uv's own cache and settings as the user has them
    proc = subprocess.Popen(
        ["bash", str(checkout / "scripts" / "env.sh"), "tiny"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()
    building = not list((tmp_path / "cache" / "venvs").glob("*/.complete"))  # said before the build ends
    rest, out = proc.stderr.read(), proc.stdout.read() if proc.stdout else ""
    assert proc.wait(timeout=300) == 0, first + rest
    venv = Path(out.strip())
    assert first.startswith("tether: building the tiny environment (once per checkout and lock; about a minute from a cold cache): ")
    assert "1 packages from envs/tiny.txt, among them six==1.17.0" in first
    assert "+ six==1.17.0" in rest  # each package installed, by name
    assert "tether: the tiny environment is ready (" in rest and str(venv) in rest
    assert building and (venv / ".complete").exists()
