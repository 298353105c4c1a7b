"""The build context of a framework's runtime image (``tether image build``, docs/images.md).

One recipe, the ``Dockerfile`` beside this module, for every framework and for the kind e2e:
:func:`build_context` lays out what it copies (the pins, Tether from a checkout or from its
wheels, your tool modules, optionally every third-party wheel for a build without network) as a
:class:`Context`, which is written to a folder (``--context DIR``) or streamed to ``docker build``
as a tar archive (nothing is copied on disk: the wheels alone are ~1 GB)."""

from __future__ import annotations

import io
import re
import sys
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

DOCKERFILE = Path(__file__).with_name("Dockerfile")

#: The runtime's extras a runner pod needs: `tether exec` (cli: Flyte, which runs each attempt), the
#: S3 store and OpenTelemetry export; what envs/core.in installs, so from a checkout the lock already
#: holds them. A plain `tether` wheel leaves them out (README "Install").
RUNTIME_EXTRAS = "s3,otel,cli"

#: The tool module of the chart's `helm test` (tether-testing, in every image): declared with yours.
HELM_TEST_TOOL = "tether.testing.weather"

#: Never copied: caches, at any depth; a project's build output, environments and tests, at its root.
_CACHES = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
_PROJECT_ONLY = frozenset({"build", "dist", "tests", ".git", ".venv"})

#: Tool modules that would shadow what the image runs on.
_RESERVED = {"tether", "tether_operator", "site", "sitecustomize", "usercustomize"}


class ImageError(ValueError):
    """A build that cannot be made as asked; the message says why and what to pass instead."""


@dataclass
class Context:
    """A build context: archive name -> a file to copy or the bytes to write."""

    framework: str
    version: str
    source: str  #: where Tether comes from, for messages ("the checkout /x", "the wheels in /d")
    tools: tuple[str, ...] = ()  #: loose tool modules, declared in the image's tether.tools entry points
    tool_packages: tuple[str, ...] = ()  #: tool projects (a pyproject.toml) installed as packages
    files: dict[str, Path | bytes] = field(default_factory=dict)

    def add_tree(self, prefix: str, root: Path, *, project: bool = False) -> None:
        """Every file under ``root`` as ``prefix/...``; a ``project`` (a pyproject.toml's folder)
        without its build output, environments and tests."""
        for path in sorted(_walk(root, _PROJECT_ONLY if project else frozenset())):
            self.files[f"{prefix}/{path.relative_to(root).as_posix()}"] = path

    def write(self, directory: Path) -> None:
        """Write the context into ``directory`` (new or empty)."""
        if directory.exists() and any(directory.iterdir()):
            raise ImageError(f"--context {directory}: not empty (the context is written into a new or empty folder)")
        for name, content in self.files.items():
            target = directory / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content if isinstance(content, bytes) else content.read_bytes())

    def tar(self, out: IO[bytes]) -> None:
        """Stream the context as the tar archive ``docker build -`` reads."""
        with tarfile.open(fileobj=out, mode="w|") as archive:
            folders: set[str] = set()
            for name, content in self.files.items():
                for parent in reversed(Path(name).parents[:-1]):  # each folder once, before its files
                    if parent.as_posix() not in folders:
                        folders.add(parent.as_posix())
                        folder = tarfile.TarInfo(parent.as_posix())
                        folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o755, 0
                        archive.addfile(folder)
                info = tarfile.TarInfo(name)
                info.mode, info.mtime = 0o644, 0  # files only; the same bytes keep Docker's layer cache
                if isinstance(content, bytes):
                    info.size = len(content)
                    archive.addfile(info, io.BytesIO(content))
                else:
                    info.size = content.stat().st_size
                    with content.open("rb") as f:
                        archive.addfile(info, f)


def _walk(root: Path, skip_here: frozenset[str] = frozenset()) -> Iterator[Path]:
    for path in root.iterdir():
        if path.name in _CACHES or path.name in skip_here or path.name.endswith((".egg-info", ".pyc")):
            continue
        if path.is_dir():
            yield from _walk(path)
        elif path.is_file():
            yield path


def find_checkout(explicit: Path | None = None) -> Path | None:
    """The Tether checkout to build from: ``explicit``, else the one this module runs from (an
    editable install, ``./tether``), else the working directory or one of its parents."""
    if explicit is not None:
        if not _is_checkout(explicit):
            raise ImageError(f"--checkout {explicit}: not a Tether checkout (no envs/ and runtime/pyproject.toml there)")
        return explicit.resolve()
    here = Path(__file__).resolve()
    for candidate in (here.parents[4] if len(here.parents) > 4 else None, *(Path.cwd().resolve(), *Path.cwd().resolve().parents)):
        if candidate is not None and _is_checkout(candidate):
            return candidate
    return None


def _is_checkout(path: Path) -> bool:
    return (path / "envs" / "core.txt").is_file() and (path / "runtime" / "pyproject.toml").is_file()


def _version_of(project: Path) -> str:
    match = re.search(r'^version = "([^"]+)"', (project / "pyproject.toml").read_text(), re.M)
    if not match:
        raise ImageError(f"{project / 'pyproject.toml'}: no version")
    return match.group(1)


def frameworks(checkout: Path) -> list[str]:
    """The frameworks a checkout has an environment for (envs/<id>.txt, core aside)."""
    return sorted(p.stem for p in (checkout / "envs").glob("*.txt") if p.stem != "core")


def build_context(
    framework: str,
    *,
    checkout: Path | None = None,
    dist: Path | None = None,
    tools_from: Sequence[Path] = (),
    wheels: Path | None = None,
    base_image: str | None = None,
) -> Context:
    """The build context of ``framework``'s runtime image: from ``dist`` (Tether's wheels,
    scripts/build-dist.sh) when given, else from ``checkout``'s sources; the pins are the
    checkout's envs/<framework>.txt when there is a checkout. Raises :class:`ImageError`."""
    if checkout is None and dist is None:
        raise ImageError(
            "no Tether checkout here: run it from a checkout (./tether image build), pass --checkout DIR, "
            "or --dist DIR with Tether's wheels (scripts/build-dist.sh)"
        )
    lock: Path | None = None
    if checkout is not None:
        known = frameworks(checkout)
        if framework not in known:
            raise ImageError(f"--framework {framework!r}: not one of {', '.join(known)} (the environments in {checkout / 'envs'})")
        lock = checkout / "envs" / f"{framework}.txt"
    if dist is not None:
        ctx = _from_wheels(framework, dist, lock)
    else:
        assert checkout is not None and lock is not None
        ctx = Context(framework, _version_of(checkout / "runtime"), f"the checkout {checkout}")
        ctx.add_tree("src/runtime", checkout / "runtime", project=True)
        ctx.add_tree("src/testing", checkout / "testing", project=True)
        for adapter in _lock_adapters(lock):
            ctx.add_tree(f"src/adapters/{adapter}", checkout / "adapters" / adapter, project=True)
    ctx.files[f"envs/{framework}.txt"] = lock if lock is not None else _NO_PINS
    _add_tools(ctx, tools_from)
    if wheels is not None:
        found = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
        if not found:
            raise ImageError(f"--wheels {wheels}: no .whl files there (every third-party wheel the pins name, for a build without network)")
        for wheel in found:
            ctx.files[f"wheels/{wheel.name}"] = wheel
    ctx.files["Dockerfile"] = dockerfile(framework, base_image).encode()
    return ctx


_NO_PINS = b"# No pins: built from wheels without a checkout; uv resolves the dependencies at build time.\n"


def _lock_adapters(lock: Path) -> list[str]:
    """The adapters an environment installs (``-e ./adapters/<id>`` lines of its lock)."""
    return re.findall(r"^-e \./adapters/([a-z0-9-]+)\s*$", lock.read_text(), re.M)


def _from_wheels(framework: str, dist: Path, lock: Path | None) -> Context:
    tether = sorted(dist.glob("tether-*.whl")) if dist.is_dir() else []
    if not tether:
        raise ImageError(f"--dist {dist}: no tether wheel there (scripts/build-dist.sh {dist} builds them)")
    version = tether[-1].name.split("-")[1]
    needed = ["tether", "tether-testing", f"tether-{framework}", *(f"tether-{a}" for a in (_lock_adapters(lock) if lock else []))]
    ctx = Context(framework, version, f"the wheels in {dist}")
    for name in dict.fromkeys(needed):
        found = sorted(dist.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
        if not found:
            raise ImageError(f"--dist {dist}: no wheel of {name} {version} there (scripts/build-dist.sh builds one per distribution)")
        ctx.files[f"src/{found[-1].name}"] = found[-1]
    requirements = [f"tether[{RUNTIME_EXTRAS}]=={version}", *(f"{n}=={version}" for n in dict.fromkeys(needed[1:]))]
    ctx.files["src/requirements.txt"] = "".join(f"{r}\n" for r in requirements).encode()
    return ctx


def _add_tools(ctx: Context, sources: Sequence[Path]) -> None:
    """Your tool modules under tools/: a ``.py`` file, a package folder (``__init__.py``) or a
    folder's top-level modules and packages are copied into site-packages and declared (entry-point
    group ``tether.tools``); a project folder (``pyproject.toml``) is installed as a package."""
    modules: dict[str, Path] = {}
    packages: list[str] = []
    for source in sources:
        if not source.exists():
            raise ImageError(f"--tools-from {source}: no such file or folder")
        if source.is_dir() and (source / "pyproject.toml").is_file():
            name = source.resolve().name
            if name in packages:
                raise ImageError(f"--tools-from {source}: a second tool project named {name}")
            packages.append(name)
            ctx.add_tree(f"tools/packages/{name}", source, project=True)
            continue
        found = _modules_in(source)
        if not found:
            raise ImageError(
                f"--tools-from {source}: no Python module there (a .py file, a package folder with __init__.py, "
                "a folder of them, or a project folder with a pyproject.toml)"
            )
        for name, path in found:
            _check_module_name(name, source)
            if name in modules:
                raise ImageError(f"--tools-from {source}: module {name} is already given by {modules[name]}")
            modules[name] = path
    for name, path in sorted(modules.items()):
        if path.is_dir():
            ctx.add_tree(f"tools/site-packages/{name}", path)
        else:
            ctx.files[f"tools/site-packages/{name}.py"] = path
    # Declared in the image (so allowed with the chart's default tools.allowedModules: []): your
    # modules and the weather tool of tether-testing that `helm test` runs.
    declared = [*sorted(modules), HELM_TEST_TOOL]
    info = "tools/site-packages/tether_image_tools-0.dist-info"
    ctx.files[f"{info}/METADATA"] = (
        b"Metadata-Version: 2.1\nName: tether-image-tools\nVersion: 0\nSummary: Tool modules added by tether image build\n"
    )
    ctx.files[f"{info}/INSTALLER"] = b"tether image build\n"
    ctx.files[f"{info}/entry_points.txt"] = ("[tether.tools]\n" + "".join(f"{m} = {m}\n" for m in declared)).encode()
    ctx.files[f"{info}/RECORD"] = b""
    ctx.files["tools/modules.txt"] = "".join(f"{m}\n" for m in declared).encode()
    ctx.tools, ctx.tool_packages = tuple(sorted(modules)), tuple(packages)


def _modules_in(source: Path) -> list[tuple[str, Path]]:
    if source.is_file():
        return [(source.stem, source.resolve())] if source.suffix == ".py" else []
    if (source / "__init__.py").is_file():
        return [(source.resolve().name, source.resolve())]
    found = [(p.stem, p.resolve()) for p in sorted(source.glob("*.py")) if p.is_file()]
    found += [(p.name, p.resolve()) for p in sorted(source.iterdir()) if p.is_dir() and (p / "__init__.py").is_file()]
    return found


def _check_module_name(name: str, source: Path) -> None:
    if not name.isidentifier():
        raise ImageError(f"--tools-from {source}: {name!r} is not a Python module name")
    if name in sys.stdlib_module_names or name in _RESERVED:
        raise ImageError(
            f"--tools-from {source}: module {name} would shadow {'the standard library' if name in sys.stdlib_module_names else name}: rename it"
        )


def dockerfile(framework: str, base_image: str | None = None) -> str:
    """The recipe with this build's framework (and base image) as its defaults, so the written
    context builds with a plain ``docker build DIR``."""
    text = DOCKERFILE.read_text()
    text = _set_default(text, "ADAPTER", framework)
    return _set_default(text, "BASE", base_image) if base_image else text


def _set_default(text: str, arg: str, value: str) -> str:
    new, count = re.subn(rf"^ARG {arg}=.*$", lambda _: f"ARG {arg}={value}", text, flags=re.M)
    if count != 1:
        raise ImageError(f"the Dockerfile has {count} ARG {arg} lines, not one")
    return new


def docker_command(ctx: Context, tag: str, *, base_image: str | None = None, quiet: bool = False, extra: Iterable[str] = ()) -> list[str]:
    """``docker build`` of the context streamed on stdin (the build args repeat the Dockerfile's
    defaults: a build cached with them stays cached)."""
    cmd = ["docker", "build", "--tag", tag, "--build-arg", f"ADAPTER={ctx.framework}"]
    if base_image:
        cmd += ["--build-arg", f"BASE={base_image}"]
    return [*cmd, *(["--quiet"] if quiet else []), *extra, "-"]
