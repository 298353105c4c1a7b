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
