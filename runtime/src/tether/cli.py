"""The ``tether`` command. Each subcommand lives in its own module and is imported on use,
so ``tether approve`` does not pay for importing an agent framework."""

from __future__ import annotations

import importlib
import os
import sys

COMMANDS = {
    "run": ("tether.commands.run", "Run an AgentRun manifest locally (Flyte local mode), with progress."),
    "exec": ("tether.commands.exec", "Run one attempt of an AgentRun request (what executors start)."),
    "tool-runner": ("tether.commands.tool_runner", "Serve an AgentTool's calls on a socket, with its own secrets (beside exec)."),
    "store-proxy": ("tether.commands.store_proxy", "Serve one run's keys of the store on a socket (beside exec)."),
    "mcp-relay": ("tether.commands.mcp_relay", "Launch a stdio MCP server behind the run's journal (tether.mcp_stdio)."),
    "approve": ("tether.commands.approve", "Approve or decline a pending tool call of a run."),
    "status": ("tether.commands.status", "Show a run's progress, steps, usage and approvals."),
    "list": ("tether.commands.list", "List the runs in a store: phase, attempt, turns, cost."),
    "ui": ("tether.commands.ui", "Serve a read-only view of a store's runs in the browser (127.0.0.1)."),
    "logs": ("tether.commands.logs", "Print (or follow) the step lines of a run's attempt."),
    "cancel": ("tether.commands.cancel", "Stop a run for good: a running tether run stops cleanly, the run is marked cancelled."),
    "image": ("tether.commands.image", "Build a framework's runtime image (docker build), with your own tool modules."),
    "crds": ("tether_operator.crds", "Write crds/*.yaml and docs/reference/ from tether.api and the docstrings (--check: fail on drift)."),
    "fake-provider": ("tether.testing.fake_provider", "Serve scripted fake model providers on loopback."),
}

#: Commands whose module is another distribution's (not in the runtime's wheel): the package to install.
_ELSEWHERE = {"tether.testing": "tether-testing", "tether_operator": "tether-operator"}
#: Commands that need an extra the default install leaves out (runtime/pyproject.toml): the module
#: looked for (not imported) and the extra that brings it.
_EXTRA = {"run": ("flyte", "cli"), "exec": ("flyte", "cli"), "ui": ("aiohttp", "cli")}


def _usage() -> str:
    from .commands import EXIT_CODES_HELP, command_name

    lines = [f"usage: {command_name()} COMMAND [ARGS...]   ({command_name()} COMMAND --help for its options)", "", "commands:"]
    lines += [f"  {name:<14} {help_text}" for name, (_, help_text) in COMMANDS.items()]
    lines += [
        "",
        "options:",
        "  --version      print the version and exit",
        "",
        EXIT_CODES_HELP.replace("exit codes:", "exit codes of run and exec:"),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:  # `tether status --json | head`: the reader had enough, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0


def _main(argv: list[str]) -> int:
    if argv and argv[0] == "--version":
        from importlib.metadata import version

        print(f"tether {version('tether')}")
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        from .commands import command_name

        print(f"{command_name()}: unknown command {argv[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    missing = _missing_extra(argv[0])
    if missing:
        print(missing, file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(COMMANDS[argv[0]][0])
    except ModuleNotFoundError as e:
        package = next((p for m, p in _ELSEWHERE.items() if e.name and e.name.startswith(m)), None)
        if package is None:
            raise
        print(f"tether {argv[0]} needs the {package} package (pip install {package})", file=sys.stderr)
        return 2
    from .contract import EXIT_STORE_UNREACHABLE, EXIT_TERMINAL
    from .errors import StoreError, StoreUnavailable

    try:
        return int(module.main(argv[1:]) or 0)
    except StoreError as e:  # the cause in one line (e.g. access denied to that prefix), not a traceback
        print(f"tether {argv[0]}: {e}", file=sys.stderr)
        return EXIT_STORE_UNREACHABLE if isinstance(e, StoreUnavailable) else EXIT_TERMINAL


def _missing_extra(command: str) -> str | None:
    """What to install for ``command`` when its extra is missing; ``None`` when it is there."""
    import importlib.util

    module, extra = _EXTRA.get(command, (None, None))
    if module is None or importlib.util.find_spec(module) is not None:
        return None
    return f"tether {command} needs {module}, which a plain install leaves out: pip install 'tether[{extra}]'"


if __name__ == "__main__":
    sys.exit(main())
