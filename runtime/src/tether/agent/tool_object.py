"""The tool object: a function or a Flyte task usable as a tool by every framework (``@tool``),
called through the tool seam (:mod:`tether.tools`)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypedDict, Unpack, cast, overload

from ..api import McpToolStatus
from ..errors import ConfigError, ToolError
from ..tools import ToolSpec, call_tool, call_tool_sync, in_tool_thread
from .in_flyte import flyte_ctx, is_flyte_task


class Tool:
    """A function — or a Flyte task — usable as a tool by every framework, through the tool seam.

    Inside a Flyte task context a Flyte task tool runs as a child task (its own image,
    resources, retries); outside one it runs in-process. Either way the call is journaled.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        cache: str = "off",
        retryable: Sequence[type[BaseException]] = (),
        approval: Any = None,
        version: str = "",
        cached_without_approval: bool = False,
    ) -> None:
        if cache not in ("off", "auto"):
            raise ConfigError(f"tool cache must be 'auto' or 'off', not {cache!r}")
        self.task: Any = fn if is_flyte_task(fn) else None  # a flyte TaskTemplate
        #: Where the call runs instead of this process: a tool runner holding the tool's secrets
        #: (``tether.toolrunner.RunnerClient``); the seam around it stays here.
        self.runner: Any = None
        #: A tool of an MCP server (AgentTool ``spec.mcp``): its annotations, shown in status.
        self.mcp: McpToolStatus | None = None
        self.fn: Callable[..., Any] = cast(Any, fn).func if self.task is not None else fn  # the user's function
        self.name = name or self.fn.__name__
        self.description = description or inspect.getdoc(self.fn) or self.name
        self.spec = ToolSpec(
            self.name,
            self._execute,
            version=version,
            cache=cache,
            retryable=tuple(retryable),
            approval=approval,
            cached_without_approval=cached_without_approval,
        )
        self.spec.code = ToolSpec(self.name, self.fn).code  # the cache key follows the user's code
        functools.update_wrapper(self, self.fn)

    async def _execute(self, **kwargs: Any) -> Any:
        if self.runner is not None:
            return await self.runner.call(kwargs)
        if self.task is not None and flyte_ctx():
            return await self.task.aio(**kwargs)  # a child Flyte task
        if inspect.iscoroutinefunction(self.fn):
            result = await self.fn(**kwargs)
        else:  # a sync tool (a blocking client, a file) runs in a worker thread, never on the loop
            result = await in_tool_thread(self.fn, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def __call__(self, **kwargs: Any) -> Any:
        """Call through the tool seam; a terminal failure raises :class:`ToolError`."""
        return await call_tool(self.spec, kwargs)

    def call_sync(self, **kwargs: Any) -> Any:
        return call_tool_sync(self.spec, kwargs)

    def as_function(self, *, errors: str = "return") -> Callable[..., Any]:
        """An async function with the tool's own name, signature and docstring that calls the
        seam — what a framework's decorator (``function_tool``, ``StructuredTool``…) wraps.

        ``errors="return"`` hands a terminal tool failure to the model as text (the loop goes
        on); ``"raise"`` raises :class:`ToolError` for frameworks with their own tool-error path.
        """

        @functools.wraps(self.fn)
        async def call(*args: Any, **kwargs: Any) -> Any:
            bound = inspect.signature(self.fn).bind(*args, **kwargs)
            try:
                return await self(**bound.arguments)
            except ToolError as e:
                if errors == "raise":
                    raise
                return tool_error_text(e)

        call.__signature__ = inspect.signature(self.fn)  # type: ignore[attr-defined]
        call.__name__ = call.__qualname__ = self.name  # frameworks name the tool after the function
        return call

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


def tool_error_text(e: ToolError) -> str:
    return f"Error: tool {e.tool} failed: {e.error_type}: {e.message}"


class ToolOptions(TypedDict, total=False):
    """What ``@tool(...)`` passes on to :class:`Tool` (its keyword arguments and defaults)."""

    name: str | None
    description: str | None
    cache: str
    retryable: Sequence[type[BaseException]]
    approval: Any
    version: str
    cached_without_approval: bool


@overload
def tool(fn: Callable[..., Any], **options: Unpack[ToolOptions]) -> Tool: ...
@overload
def tool(fn: None = None, **options: Unpack[ToolOptions]) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(fn: Callable[..., Any] | None = None, **options: Unpack[ToolOptions]) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a function or a Flyte task a durable tool. Stack it over ``@env.task``::

        @tool(cache="auto")
        @env.task
        async def get_weather(city: str) -> str: ...

    ``approval`` (``True``, a prompt template such as ``"Refund {amount} to {order}?"``, or a
    callable) makes every call wait for a human decision without holding compute. Such a tool
    never reuses a result cached by an earlier run: ``cache="auto"`` with ``approval`` is refused
    unless ``cached_without_approval=True`` says a cached result may skip the human.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, **options)

    return wrap(fn) if fn is not None else wrap


def as_tools(tools: Sequence[Any]) -> list[Tool]:
    return [t if isinstance(t, Tool) else Tool(t) for t in tools]
