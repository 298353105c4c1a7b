"""AgentTool: a tool (a Python function) AgentRuns in its namespace may call, and its status."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from .shared import (
    DURATION,
    ENV_NAME,
    IMPORT_PATH,
    MAX_DURATION,
    BaseURL,
    Condition,
    Duration,
    Image,
    Resources,
    SecretKeyRef,
    Text,
    _cel,
    _conditions,
    _keyed,
    _names_once,
    _observed_generation,
    _refuse_duplicates,
    _Wire,
    parse_duration,
)

__all__ = [
    "CACHE_WITH_APPROVAL",
    "MIN_APPROVAL_TIMEOUT",
    "AgentToolSpec",
    "AgentToolStatus",
    "Approval",
    "EnvFromSecret",
    "McpHeader",
    "McpServer",
]

# --------------------------------------------------------------------------------- AgentTool


#: The shortest approval timeout admission accepts: a human needs time to see the request.
MIN_APPROVAL_TIMEOUT = "1m"


def _approval_timeout(value: str | None) -> str | None:
    if value is not None and parse_duration(value) < parse_duration(MIN_APPROVAL_TIMEOUT):
        raise ValueError(f"an approval timeout must be at least {MIN_APPROVAL_TIMEOUT} (a human needs time to decide), not {value}")
    return value


class Approval(_Wire):
    """Human approval before each call of the tool.

    Every new call waits for a decision: results cached by earlier runs are not reused for such a
    tool unless `cachedWithoutApproval` says so. Within one run a call that was approved and
    completed replays after a crash without asking again (that is the journal, not the cache).
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.required",
                    "approval settings need required: true (remove approval to call the tool without asking)",
                    fieldPath=".required",
                )
            ]
        }
    )

    required: bool = Field(
        default=False, description="Ask a human before each call. Must be true when approval is set (remove approval instead)."
    )
    prompt: str | None = Field(
        default=None,
        max_length=2048,
        description="Question shown to the approver; `{name}` placeholders are filled from the "
        "call's arguments, e.g. 'Refund {amount} to {customer}?'.",
    )
    timeout: Annotated[str | None, AfterValidator(_approval_timeout)] = Field(
        default=None,
        pattern=DURATION,
        max_length=32,
        description=f"How long to wait for a decision, at least {MIN_APPROVAL_TIMEOUT}, e.g. 24h; then defaultAction applies. "
        "Without it the run waits indefinitely.",
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(f"duration(self) >= duration('{MIN_APPROVAL_TIMEOUT}')", f"must be at least {MIN_APPROVAL_TIMEOUT}")
            ]
        },
    )
    default_action: Literal["approve", "decline"] = Field(
        default="decline",
        description="Decision taken when the timeout passes. approve is honoured only where the cluster admin "
        "allows auto-approval (chart value approvals.allowAutoApprove, default false); otherwise the tool is not "
        "Ready and runs using it are refused.",
    )
    cached_without_approval: bool = Field(
        default=False,
        description="Allow cache: auto on this tool: a result cached by an earlier run with the same version and "
        "arguments is then returned WITHOUT asking anyone. Off by default: every new call needs a decision.",
    )

    @model_validator(mode="after")
    def _required(self) -> Approval:
        if not self.required:
            raise ValueError("approval settings need required: true (remove approval to call the tool without asking)")
        return self


class EnvFromSecret(_Wire):
    """An environment variable of the tool, taken from a Secret."""

    name: str = Field(max_length=128, pattern=ENV_NAME, description="Variable name.")
    secret_key_ref: SecretKeyRef = Field(description="Secret key holding the value.")


#: An HTTP header name (RFC 9110 token, letters, digits and `-`): also the file name of its value
#: in the tool runner's secrets directory (`tools/<AgentTool>/<Header>`).
HEADER_NAME = r"^[A-Za-z0-9][A-Za-z0-9-]*$"
#: An MCP tool name (the MCP specification's characters).
MCP_TOOL_NAME = r"^[A-Za-z0-9_.-]+$"


class McpHeader(_Wire):
    """An HTTP header sent to a remote MCP server, its value taken from a Secret."""

    name: str = Field(max_length=128, pattern=HEADER_NAME, description="Header name, e.g. Authorization.")
    secret_key_ref: SecretKeyRef = Field(description="Secret key holding the header's whole value, e.g. `Bearer <token>`.")


class McpServer(_Wire):
    """An MCP server whose tools the agent may call: a remote URL (Streamable HTTP) or a stdio
    command run in the tool's own container. The tool side opens the MCP session, never the agent."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "has(self.url) != has(self.command)", "set exactly one of url (a remote server) and command (stdio)", fieldPath=".url"
                ),
                _cel(
                    "!has(self.headers) || has(self.url)",
                    "headers are sent to a remote server only: set url, or remove headers",
                    fieldPath=".headers",
                ),
            ]
        }
    )

    url: BaseURL | None = Field(default=None, description="Streamable HTTP endpoint of a remote server, e.g. https://mcp.example.com/mcp.")
    headers: list[McpHeader] | None = _keyed(
        "name",
        "Headers sent with every request to url, each value from a Secret (held by the tool runner only); each name at most once.",
        default=None,
        max_length=16,
    )
    command: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="A stdio server: the program and its arguments, run in the tool's container (its image); "
        "its environment is the AgentTool's env and nothing of the runner's.",
    )
    tools: Annotated[list[Annotated[str, Field(max_length=128, pattern=MCP_TOOL_NAME)]], _names_once("tool")] = Field(
        min_length=1,
        max_length=128,
        description="The server's tools the agent may call, by name (required: a tool the server adds later is never offered). "
        "A name the server does not list fails the run at start.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    destructive_needs_approval: bool = Field(
        default=True,
        strict=True,
        description="A tool the server marks destructive (annotations: destructiveHint true, or absent, and readOnlyHint not true) "
        "waits for a human decision before each call, as approval.required does. false: call such tools without asking.",
    )

    @field_validator("headers")
    @classmethod
    def _unique_headers(cls, headers: list[McpHeader] | None) -> list[McpHeader] | None:
        _refuse_duplicates([h.name.lower() for h in headers or []], "header")
        return headers

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.url is None) == (self.command is None):
            raise ValueError("set exactly one of url (a remote server) and command (stdio)")
        if self.headers and self.url is None:
            raise ValueError("headers are sent to a remote server only: set url, or remove headers")
        return self


CACHE_WITH_APPROVAL = (
    "cache: auto would return results cached by earlier runs without asking for approval; "
    "set cache: off, or approval.cachedWithoutApproval: true to allow it"
)


ONE_KIND = "set exactly one of implementation (a Python function) and mcp (an MCP server)"
MCP_URL_ENV = "env is the environment of a stdio MCP server (mcp.command); a remote one (mcp.url) gets Secrets as mcp.headers"


class AgentToolSpec(_Wire):
    """A tool an agent may call: a Python function, where it runs, and how it is governed."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!(has(self.cache) && self.cache == 'auto' && has(self.approval) && self.approval.required)"
                    " || (has(self.approval.cachedWithoutApproval) && self.approval.cachedWithoutApproval)",
                    CACHE_WITH_APPROVAL,
                    fieldPath=".cache",
                ),
                _cel("has(self.implementation) != has(self.mcp)", ONE_KIND, fieldPath=".implementation"),
                _cel("!has(self.mcp) || !has(self.mcp.url) || !has(self.env)", MCP_URL_ENV, fieldPath=".env"),
            ]
        }
    )

    description: Text = Field(
        min_length=1,
        max_length=4096,
        description="What the tool does; the model reads this to decide when to call it.",
    )
    implementation: str | None = Field(
        default=None,
        max_length=512,
        pattern=IMPORT_PATH,
        description="The function, as `module:function` importable in the image (or set mcp instead).",
    )
    mcp: McpServer | None = Field(
        default=None,
        description="An MCP server instead of a function: each of its allowed tools is a tool of the agent, called from "
        "the tool's own runner, journaled, replayed and approved like any tool.",
    )
    version: Text = Field(
        default="1",
        min_length=1,
        max_length=64,
        description="Part of the tool call's journal key: change it when the implementation changes so cached results are not reused.",
    )
    image: Image | None = Field(default=None, description="Image to run the tool in (default: the run's).")
    resources: Resources | None = Field(default=None, description="Compute for the tool.")
    retries: int = Field(default=0, ge=0, le=20, strict=True, description="Retries of a call that failed recoverably.")
    timeout: Duration | None = Field(
        default=None,
        description=f"Limit of one call, e.g. 30s, at most {MAX_DURATION}; a call over it fails recoverably.",
    )
    cache: Literal["auto", "off"] | None = Field(
        default=None,
        description="auto: reuse a result across runs for the same version and arguments; off: "
        "never across runs. Within one run a completed call never executes twice either way. "
        "Default: auto, or off for a tool that requires approval or an MCP server; cache: auto with approval "
        "required is refused unless approval.cachedWithoutApproval is true.",
    )
    approval: Approval | None = Field(default=None, description="Human approval of each call.")
    env: list[EnvFromSecret] | None = _keyed(
        "name", "Environment variables from Secrets; each name at most once.", default=None, max_length=64
    )

    @field_validator("env")
    @classmethod
    def _unique_env(cls, env: list[EnvFromSecret] | None) -> list[EnvFromSecret] | None:
        _refuse_duplicates([e.name for e in env or []], "env")
        return env

    @property
    def approval_required(self) -> bool:
        return self.approval is not None and self.approval.required

    @property
    def effective_cache(self) -> Literal["auto", "off"]:
        """The cache setting in force: the spec's, else off for an approval-required tool or an MCP
        server (a remote tool's result is not a function of its arguments), else auto."""
        return self.cache or ("off" if self.approval_required or self.mcp is not None else "auto")

    @model_validator(mode="after")
    def _cache_needs_decision(self) -> AgentToolSpec:
        if self.cache == "auto" and self.approval is not None and self.approval.required and not self.approval.cached_without_approval:
            raise ValueError(CACHE_WITH_APPROVAL)
        return self

    @model_validator(mode="after")
    def _one_kind(self) -> AgentToolSpec:
        if (self.implementation is None) == (self.mcp is None):
            raise ValueError(ONE_KIND)
        if self.mcp is not None and self.mcp.url is not None and self.env:
            raise ValueError(MCP_URL_ENV)
        return self


class AgentToolStatus(_Wire):
    """Whether the tool is usable."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int = _observed_generation()
    conditions: list[Condition] = _conditions()
