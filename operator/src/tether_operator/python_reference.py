"""docs/reference/python.md, the Python API reference, from the docstrings (written by ``tether crds``
in a checkout, beside the field reference; ``--check`` covers it).

The runtime's public names are ``tether.__all__``, imported and read with ``inspect``. Each
adapter package re-exports its public names (``from .adapter import X as X``); those are read from
the package's source with ``ast``, so no framework need be installed to render the page.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import tether

INTRO = """# Python API reference

<!-- generated from the docstrings by `tether crds`; do not edit (a test runs `tether crds --check`). -->

Two layers: `tether` (the runtime: tools, errors, helpers shared by every framework) and one
package per framework, `tether_<id>` (`tether_openai`, `tether_langgraph`, ...), whose `run_agent`
and `run_agent_sync` are bound to that framework's adapter. An agent imports from its framework's
package; a tool module that serves several frameworks imports `tether.tool`.

```python
from tether_openai import run_agent, run_agent_sync, tool   # run_agent(prompt, **options)
import tether                                              # tether.idempotency_key(), tether.secret(...)
```

- [Running an agent](#running-an-agent): `run_agent`, `run_agent_sync`, `AgentResult`
- [Under Flyte](#under-flyte)
- [The runtime, `tether`](#the-runtime-tether): every name of `tether.__all__`
- [The framework packages](#the-framework-packages): what each `tether_<id>` adds
- Where a run's model calls go: [the endpoint rules](../endpoints.md)

## Running an agent

Each framework package's `run_agent(prompt, **options)` is `tether.run_agent(adapter, prompt,
**options)` with its adapter bound; `run_agent_sync` is the same for synchronous code
(`asyncio.run` of it). The options and the result:
"""

FLYTE = """## Under Flyte

Inside a Flyte task `run_agent` needs nothing more: the run id is the Flyte run and action (a
retry of the action resumes the same run), the journal lives under the run's own storage, and
the run's timeline goes to the task's report. Run it locally as any Flyte program:

```python
import flyte
from agents import Agent
from tether_openai import function_tool, run_agent, tool

env = flyte.TaskEnvironment(name="agents")


@tool(cache="auto")  # stack it over @env.task for a tool that runs as its own Flyte task
def get_weather(city: str) -> str:
    \"\"\"Current weather in a city.\"\"\"
    return f"sunny in {city}"


@env.task(report=True)
async def ask(question: str) -> str:
    agent = Agent(name="weather", model="gpt-4o-mini", tools=[function_tool(get_weather)])
    return (await run_agent(question, agent=agent, memory_key="alice")).output


if __name__ == "__main__":
    flyte.init()  # a local execution; flyte.init_from_config() for a Flyte cluster
    run = flyte.with_runcontext(mode="local").run(ask, "Weather in Paris?")
    print(run.outputs()[0])
```

`tether status` and `tether logs` read the local store; a run under Flyte keeps its journal in the
Flyte run's storage, so name that store (`--store`), or give `run_agent` a `store=` and `run_id=`
of your own to find it where you look.
"""


def _doc(obj: Any) -> str:
    return inspect.getdoc(obj) or ""


def _md(doc: str) -> str:
    """A docstring as Markdown: ``code`` to `code`, :func:`x` to `x`, ``::`` blocks indented."""
    doc = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", doc)
    doc = doc.replace("``", "`")
    return re.sub(r"::\n", ":\n", doc)


def _signature(name: str, obj: Any, skip: tuple[str, ...] = ()) -> str:
    """``name(a: int = 1, *, b: str | None = None) -> T``: annotations as written, defaults as values."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""
    parts: list[str] = []
    star = False
    for p in sig.parameters.values():
        if p.name in skip:
            continue
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
        star = star or p.kind in (p.KEYWORD_ONLY, p.VAR_POSITIONAL)
        text = ("*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else "") + p.name
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            default = repr(p.default)
            text += f" = {default}" if p.annotation is not p.empty else f"={default}"
        parts.append(text)
    returns = f" -> {_annotation(sig.return_annotation)}" if sig.return_annotation not in (sig.empty, None, "None") else ""
    one_line = f"{name}({', '.join(parts)}){returns}"
    return one_line if len(one_line) <= 100 else f"{name}(\n    " + ",\n    ".join(parts) + f",\n){returns}"


def _annotation(annotation: Any) -> str:
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def _entry(title: str, obj: Any, signature: str) -> list[str]:
    kind = "class" if inspect.isclass(obj) else "function"
    out = [f"### `{title}`", ""]
    if signature:
        out += ["```python", f"{'class ' if kind == 'class' else ''}{signature}", "```", ""]
    return [*out, _md(_doc(obj)), ""]


def _bound_run_agent() -> str:
    return "async " + _signature("run_agent", tether.run_agent, skip=("adapter",))


def _adapter_exports(package_init: Path) -> list[tuple[str, str, str]]:
    """``(name, signature, docstring)`` of each name a package's ``__init__`` re-exports."""
    tree = ast.parse(package_init.read_text())
    out = []
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if alias.asname != alias.name or alias.name in ("Tool", "tool"):
                continue  # only explicit re-exports; Tool and tool are tether's, documented once
            out.append((alias.name, *_definition(_source_of(package_init, node), alias.name)))
    return out


def _source_of(importer: Path, node: ast.ImportFrom) -> Path:
    """The file ``node`` (in ``importer``) imports from: the same package, or another adapter's."""
    if node.level:
        return importer.parent / ((node.module or "__init__").replace(".", "/") + ".py")
    top, _, rest = (node.module or "").partition(".")
    adapters = importer.parents[3]  # adapters/<id>/src/<package>/<file>
    return adapters / top.removeprefix("tether_").replace("_", "-") / "src" / top / ((rest or "__init__").replace(".", "/") + ".py")


def _definition(path: Path, name: str) -> tuple[str, str]:
    """A top-level definition's signature and docstring (a constant: its ``#:`` comment)."""
    source = path.read_text()
    tree = ast.parse(source)
    lines = source.splitlines()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            if isinstance(node, ast.ClassDef):
                return f"class {name}", ast.get_docstring(node) or ""
            args = ast.unparse(node.args)
            returns = f" -> {ast.unparse(node.returns)}" if node.returns else ""
            prefix = "async " if isinstance(node, ast.AsyncFunctionDef) else ""
            return f"{prefix}{name}({args}){returns}", ast.get_docstring(node) or ""
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names):
            return _definition(_source_of(path, node), name)  # defined where it is imported from
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            comment: list[str] = []
            for line in reversed(lines[: node.lineno - 1]):
                if not line.startswith("#:"):
                    break
                comment.insert(0, line[2:].strip())
            return name, " ".join(comment)
    raise LookupError(f"{path}: no top-level {name}")


def _first_paragraph(doc: str) -> str:
    return " ".join(doc.split("\n\n")[0].split())


def render(repo: Path) -> str:
    out = [INTRO, "```python", _bound_run_agent(), "```", "", _md(_doc(tether.run_agent)), ""]
    out += ["```python", "run_agent_sync(prompt, **options) -> AgentResult", "```", ""]
    out += _entry("AgentResult", tether.AgentResult, "")
    out += [FLYTE, "## The runtime, `tether`", ""]
    for name in sorted(tether.__all__, key=lambda n: (n not in ("tool", "Tool"), n.lower())):
        obj = getattr(tether, name)
        if name in ("run_agent", "run_agent_sync"):
            out += [f"### `tether.{name}`", "", f"`tether.{name}(adapter, prompt, **options)`: as above, for an `Adapter` of your own.", ""]
            continue
        signature = (
            ""
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__init__ is BaseException.__init__
            else _signature(name, obj)
        )
        out += _entry(f"tether.{name}", obj, signature)
    out += [
        "## The framework packages",
        "",
        "Every `tether_<id>` exports `tool` and `Tool` (the runtime's), `run_agent` and `run_agent_sync`",
        "(bound to its adapter) and `ADAPTER`; besides them:",
        "",
    ]
    for init in sorted(repo.glob("adapters/*/src/tether_*/__init__.py")):
        framework = init.parents[2].name
        out += [f"### `{init.parent.name}` ({framework})", "", f"adapters/{framework}/README.md; docs/getting-started/{framework}.md.", ""]
        out += ["| name | what |", "|---|---|"]
        for _, signature, doc in _adapter_exports(init):
            what = _md(_first_paragraph(doc)).replace("|", "\\|") or "—"
            shown = signature.replace("|", "\\|")
            out.append(f"| `{shown}` | {what} |")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
