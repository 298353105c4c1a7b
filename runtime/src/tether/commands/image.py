"""``tether image build --framework X [--tools-from PATH]... [--tag T] [--base-image B]``: build a
framework's runtime image (what runner pods run) with ``docker build``, from a checkout or from
Tether's wheels, with your own tool modules (docs/images.md). ``--context DIR`` writes the build
context instead, for another builder (``docker build DIR``, buildah, kaniko)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from ..image import Context, ImageError, build_context, docker_command, find_checkout
from . import command_name, parser

#: What --help says (the module docstring's markup aside).
DESCRIPTION = (
    "Build a framework's runtime image (what runner pods run) with docker build, from a checkout or from "
    "Tether's wheels, with your own tool modules (docs/images.md). --context DIR writes the build context "
    "instead, for another builder (docker build DIR, buildah, kaniko)."
)


def main(argv: list[str]) -> int:
    p = parser("image", DESCRIPTION)
    sub = p.add_subparsers(dest="action", metavar="build", required=True)
    b = sub.add_parser("build", help="build a framework's runtime image", description=DESCRIPTION)
    b.prog = f"{command_name()} image build"
    b.add_argument("--framework", required=True, help="the agent framework (an environment of envs/: openai, langgraph, ...)")
    b.add_argument(
        "--tools-from",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="your tool modules: a .py file, a package folder, a folder of them (declared in the image, "
        "entry-point group tether.tools), or a project folder with a pyproject.toml (installed); repeatable",
    )
    b.add_argument("--tag", help="image name and tag (default tether-runtime-FRAMEWORK:VERSION)")
    b.add_argument("--base-image", help="FROM this image: Debian-like with Python 3.11 and venv (default python:3.11-slim)")
    b.add_argument(
        "--dist", type=Path, metavar="DIR", help="install Tether from these wheels (scripts/build-dist.sh) instead of a checkout's sources"
    )
    b.add_argument(
        "--checkout",
        type=Path,
        metavar="DIR",
        help="the Tether checkout (default: the one this tether runs from, or the working directory's)",
    )
    b.add_argument(
        "--wheels",
        type=Path,
        metavar="DIR",
        help="every third-party wheel the build installs: no package index is used (a build without network)",
    )
    b.add_argument("--context", type=Path, metavar="DIR", help="write the build context into DIR (new or empty) and stop; no docker")
    b.add_argument("--quiet", action="store_true", help="docker build --quiet: print only the image id")
    args = p.parse_args(argv)
    try:
        checkout = find_checkout(args.checkout)
        ctx = build_context(
            args.framework,
            checkout=checkout,
            dist=args.dist,
            tools_from=args.tools_from,
            wheels=args.wheels,
            base_image=args.base_image,
        )
        tag = args.tag or f"tether-runtime-{args.framework}:{ctx.version}"
        if args.context is not None:
            ctx.write(args.context)
    except ImageError as e:
        print(f"{command_name()} image build: {e}", file=sys.stderr)
        return 2
    print(f"{command_name()} image build: {tag}: {args.framework} from {ctx.source}{_tools_note(ctx)}", file=sys.stderr)
    cmd = docker_command(ctx, tag, base_image=args.base_image, quiet=args.quiet)
    if args.context is not None:
        print(f"context written to {args.context}; build it with: docker build --tag {tag} {args.context}", file=sys.stderr)
        return 0
    if shutil.which(cmd[0]) is None:
        print(
            f"{command_name()} image build: no docker on PATH; write the context with --context DIR and build it with your builder",
            file=sys.stderr,
        )
        return 2
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE)
    assert proc.stdin is not None
    try:
        ctx.tar(proc.stdin)
    except BrokenPipeError:
        pass  # docker stopped reading: its exit code and message say why
    finally:
        proc.stdin.close()
    code = proc.wait()
    if code == 0:
        print(tag)
    return code


def _tools_note(ctx: Context) -> str:
    parts = []
    if ctx.tools:
        listed = ", ".join(ctx.tools)
        parts.append(
            f"tool modules {listed} (declared in the image: allowed with the chart's tools.allowedModules: [], "
            f"or list them there: [{listed}])"
        )
    if ctx.tool_packages:
        parts.append(
            f"tool projects {', '.join(ctx.tool_packages)} (installed: their own tether.tools entry points, or tools.allowedModules)"
        )
    return "; " + "; ".join(parts) if parts else ""
