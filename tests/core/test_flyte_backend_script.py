"""scripts/flyte-backend.sh finds the Flyte backend's pinned sources on any machine: the tarballs
in the shared sources folder beside the checkout (`../shared/sources`, where every developer
machine and CI has them; no machine-specific default path), checked against their pinned sha256.
Without them it exits 3 naming what is missing (the group is reported NOT RUN, never passed); a
tarball with another checksum is refused. The build itself is cached by commit: a binary already
in the cache is used as it is (here a stand-in, so no test compiles the backend)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "flyte-backend.sh"
SHARED = ROOT.parent / "shared" / "sources"


def pinned(name: str) -> str:
    found = re.search(rf"^{name}=(\S+)", SCRIPT.read_text(), re.M)
    assert found, name
    return found.group(1)


def new_machine(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A fresh checkout (the script only) with an empty shared sources folder beside it, a cache
    holding a built binary for the pinned commits, and the environment of a new shell."""
    checkout = tmp_path / "clone"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, checkout / "scripts" / "flyte-backend.sh")
    sources = tmp_path / "shared" / "sources"
    sources.mkdir(parents=True)
    go = subprocess.run(["go", "env", "GOVERSION"], env={**os.environ, "GOTOOLCHAIN": "local"}, capture_output=True, text=True, check=True)
    key = f"{pinned('FLYTE_REV')[:12]}_stow-{pinned('STOW_REV')[:12]}_{go.stdout.strip()}_r{pinned('RECIPE')}"
    binary = tmp_path / "cache" / "flyte" / key / "bin" / "flyte"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TETHER_CACHE": str(tmp_path / "cache")}
    return checkout / "scripts" / "flyte-backend.sh", sources, env


def test_the_pinned_tarballs_beside_the_checkout_are_the_sources(tmp_path: Path) -> None:
    script, sources, env = new_machine(tmp_path)
    for name in (pinned("FLYTE_TGZ"), pinned("STOW_TGZ")):
        (sources / name).symlink_to(SHARED / name)
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (built,) = (tmp_path / "cache" / "flyte").glob("*/bin/flyte")
    assert done.stdout.strip().splitlines()[-1] == str(built.parent.resolve())  # the cached build, not rebuilt
    assert "ready:" in done.stderr and "compiling" not in done.stderr


def test_without_sources_it_exits_3_naming_them(tmp_path: Path) -> None:
    script, _, env = new_machine(tmp_path)
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert pinned("FLYTE_TGZ") in done.stderr and pinned("STOW_TGZ") in done.stderr
    assert "clone/../shared/sources" in done.stderr  # the folder beside the checkout
    assert "TETHER_FLYTE_SRC" in done.stderr and "TETHER_STOW_SRC" in done.stderr


def test_a_tarball_with_another_checksum_is_refused(tmp_path: Path) -> None:
    script, sources, env = new_machine(tmp_path)
    (sources / pinned("FLYTE_TGZ")).write_bytes(b"not the pinned source")
    (sources / pinned("STOW_TGZ")).symlink_to(SHARED / pinned("STOW_TGZ"))
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"expected {pinned('FLYTE_SHA')}" in done.stderr
