"""AgentRun: the spec of one run of an agent, and the status the operator writes for it."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import (
    ConfigDict,
    Field,
    model_validator,
)

from .shared import (
    IMPORT_PATH,
    MAX_DURATION,
    MAX_INPUT,
    MAX_INSTRUCTIONS,
    BaseURL,
    Condition,
    Duration,
    Framework,
    Image,
    LabelValue,
    ObjectName,
    Phase,
    Provider,
    Resources,
    SecretKeyRef,
    Text,
    Toleration,
    _cel,
    _conditions,
    _count,
    _keyed,
    _names_once,
    _observed_generation,
    _Wire,
    parse_duration,
)

__all__ = [
    "BYO_AGENT_OWN_TOOLS",
    "MAX_TTL_SECONDS",
    "AgentRunSpec",
    "AgentRunStatus",
    "ApprovalStatus",
    "Divergence",
    "Execution",
    "Limits",
    "McpToolStatus",
    "Model",
    "Result",
    "Steps",
    "Usage",
]

# ---------------------------------------------------------------------------------- AgentRun


class Model(_Wire):
    """The model the agent calls and how to reach it."""

    name: Text = Field(min_length=1, max_length=256, description="Model name as the provider knows it, e.g. gpt-4.1.")
    provider: Provider = Field(default=Provider.OPENAI, description="Wire protocol of the model provider.")
    base_url: BaseURL | None = Field(
        default=None,
        alias="baseURL",
        description="Endpoint to call instead of the provider's default, e.g. an "
        "OpenAI-compatible server (with provider: openai) or a fake provider in tests. http or "
        "https, without credentials. The operator refuses loopback, link-local and cloud metadata "
        "addresses (also when the host name resolves to one) unless the chart's "
        "providers.allowedBaseURLs lists it; when that list is set, only its entries are allowed.",
    )
    api_key_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding the API key. It reaches the agent only through its "
        "environment (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY or MISTRAL_API_KEY).",
    )


class Limits(_Wire):
    """Hard limits that stop a run (as a terminal failure) when reached."""

    max_turns: int | None = Field(default=None, ge=1, le=10_000, strict=True, description="Maximum model turns in the run.")
    max_cost_usd: float | None = Field(
        default=None,
        alias="maxCostUSD",
        ge=0,
        le=100_000,
        strict=True,
        description="Maximum live model spend of the run in US dollars, over all its attempts (a replayed turn is free; status.usage.runLiveCostUSD).",
    )
    unknown_cost: Literal["stop", "ignore"] = Field(
        default="stop",
        description="With maxCostUSD: what a live turn of unknown cost does (the provider's usage could not be read, or the "
        "model is not in the price table). `stop` (default, fail closed): the next live turn is refused like a limit hit. "
        "`ignore` (fail open): the turn counts as $0 and the run goes on. Status counts such turns in usage.unknownCostTurns.",
    )


#: A Job's ttlSecondsAfterFinished is an int32 too.
MAX_TTL_SECONDS = 2**31 - 1

BYO_AGENT_OWN_TOOLS = (
    "a bring-your-own agent (spec.agent) brings its own tools and instructions: spec.tools and "
    "spec.instructions would not reach it; remove them, and make its tools Tether tools (the adapter's @tool) "
    "so that they are journaled"
)


class AgentRunSpec(_Wire):
    """What to run: an agent in one framework, a model, instructions, an input, tools."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.agent) || ((!has(self.tools) || size(self.tools) == 0) && !has(self.instructions))",
                    BYO_AGENT_OWN_TOOLS,
                    fieldPath=".agent",
                )
            ]
        }
    )

    framework: Framework = Field(description="Agent framework that owns the loop.")
    model: Model = Field(description="Model the agent calls.")
    instructions: Text | None = Field(default=None, max_length=MAX_INSTRUCTIONS, description="System instructions of the agent.")
    input: Text = Field(min_length=1, max_length=MAX_INPUT, description="The user's input to the agent (≤ 32 KiB).")
    agent: str | None = Field(
        default=None,
        max_length=512,
        pattern=IMPORT_PATH,
        description="Bring your own agent: `module:attribute` importable in the image. Without "
        "it the adapter builds the agent from instructions, model and tools.",
    )
    tools: Annotated[list[ObjectName], _names_once("tool")] = Field(
        default_factory=list,
        max_length=64,
        description="Names of AgentTools in this namespace the agent may call.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    image: Image | None = Field(
        default=None,
        description="Container image with the framework adapter (and the agent, if `agent` is set).",
    )
    resources: Resources | None = Field(default=None, description="Compute for the agent process.")
    node_selector: dict[str, LabelValue] | None = Field(
        default=None,
        max_length=32,
        description="Node labels the agent process must be scheduled on.",
    )
    tolerations: list[Toleration] | None = Field(default=None, max_length=32, description="Taints the agent process tolerates.")
    memory_key: str | None = Field(
        default=None,
        max_length=128,
        pattern=r"^[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$",
        description="Name of a memory shared by the runs of this namespace that use the same key "
        "(a conversation, a session). Without it the run starts with no memory.",
    )
    retries: int = Field(
        default=2,
        ge=0,
        le=20,
        strict=True,
        description="How many times a run whose process died is started again (it replays "
        "finished work). Terminal failures are never retried.",
    )
    timeout: Duration = Field(
        default="1h",
        description=f"Wall-clock limit of one attempt, e.g. 30m or 2h, at most {MAX_DURATION}; waiting for approval does not count.",
    )
    durable: bool = Field(
        default=True,
        strict=True,
        description="Journal model turns and tool calls so a retry replays them. False runs without a journal (every attempt starts over).",
    )
    limits: Limits | None = Field(default=None, description="Turn and cost limits.")
    standby: bool = Field(
        default=False,
        strict=True,
        description="Kubernetes executor: keep the next attempt's pod started beside the running one (preferably "
        "on another node), its imports done, so a retry after a lost pod resumes within about a second. It "
        "holds the run's resources twice (its GPUs too, when spec.resources asks for them).",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        le=MAX_TTL_SECONDS,
        strict=True,
        description="Like a Job's: the operator deletes the AgentRun this many seconds after it finished "
        "(Succeeded or Failed, status.completionTime), its pods and request ConfigMap with it; the journal "
        "and progress stay in the store. 0 deletes it as soon as it finishes; unset keeps it until someone "
        "deletes it. `tether run` has no object to delete and ignores it.",
    )

    @model_validator(mode="after")
    def _byo_agent_brings_its_own(self) -> AgentRunSpec:
        if self.agent and (self.tools or self.instructions):  # a field nothing implements is refused
            raise ValueError(BYO_AGENT_OWN_TOOLS)
        return self

    @property
    def timeout_seconds(self) -> float:
        return parse_duration(self.timeout)


class Execution(_Wire):
    """Where the run executes."""

    model_config = ConfigDict(extra="ignore")

    executor: str | None = Field(default=None, description="Executor: local or flyte.")
    name: str | None = Field(default=None, description="Execution name, derived from the AgentRun's uid.")
    url: str | None = Field(default=None, description="Link to the execution, when one exists.")


class Divergence(_Wire):
    """Where a retry first sent a step the journal did not hold while recorded steps of that kind were left."""

    model_config = ConfigDict(extra="ignore")

    kind: Literal["model", "tool"] = Field(description="model (a turn) or tool (a call).")
    step: int = Field(ge=0, description="Index of the step within the attempt (1 = first).")
    attempt: int = Field(default=0, ge=0, description="The attempt that diverged.")
    fingerprint: str | None = Field(default=None, max_length=128, description="Fingerprint of the request not found in the journal.")


class Steps(_Wire):
    """Journal counts: live steps ran now, replayed steps came from the journal."""

    model_config = ConfigDict(extra="ignore")

    model_live: int = _count("Model turns called live.")
    model_replayed: int = _count("Model turns replayed.")
    tool_live: int = _count("Tool calls executed.")
    tool_replayed: int = _count("Tool calls replayed.")
    run_model_live: int | None = Field(
        default=None,
        ge=0,
        description="Model turns called live over every attempt so far (each recorded turn was live once, in the attempt that recorded it); the other counts are the last attempt's.",
    )
    run_tool_live: int | None = Field(default=None, ge=0, description="Tool calls executed over every attempt so far.")
    normalised_parts: int = _count(
        "Volatile parts of model requests (a CLI's date, kernel, working directory) left out of their fingerprints."
    )
    first_divergence: Divergence | None = Field(
        default=None,
        description="First step at which a retry sent a request not in the journal (a cache miss, not an error).",
    )
    turns: str | None = Field(default=None, description="Model turns as live/replayed (for the printer column).")


class Usage(_Wire):
    """Tokens and cost as read from the provider's responses."""

    model_config = ConfigDict(extra="ignore")

    input_tokens: int = _count("Input tokens, all turns.")
    output_tokens: int = _count("Output tokens, all turns.")
    cached_input_tokens: int = _count("Input tokens the provider served from its cache.")
    cache_write_tokens: int = _count("Input tokens written to the provider's cache.")
    cost_usd: float = Field(default=0.0, alias="costUSD", description="Cost of all turns in US dollars.")
    live_cost_usd: float = Field(default=0.0, alias="liveCostUSD", description="Cost of the turns called live.")
    saved_usd: float = Field(default=0.0, alias="savedUSD", description="Cost of the turns replayed (not paid again).")
    framework_cost_usd: float | None = Field(
        default=None,
        alias="frameworkCostUSD",
        description="The framework's own cost figure for this attempt, where it reports one (the Claude Agent SDK's total_cost_usd; replayed turns included).",
    )
    run_live_cost_usd: float = Field(
        default=0.0,
        alias="runLiveCostUSD",
        description="Live spend of the whole run, every attempt so far (what limits.maxCostUSD counts); the other figures are the last attempt's.",
    )
    run_unknown_cost_turns: int = _count(
        "Live turns of unknown cost over every attempt so far: runLiveCostUSD is a lower bound.", alias="runUnknownCostTurns"
    )
    live_tokens: int = _count("Tokens of the turns called live.")
    run_live_tokens: int | None = Field(default=None, ge=0, description="Tokens of the turns called live over every attempt so far.")
    replayed_tokens: int = _count("Tokens of the turns replayed from the journal.")
    unpriced_models: list[str] = Field(default_factory=list, max_length=32, description="Models with no price: their cost is not counted.")
    unknown_cost_turns: int = _count(
        "Live turns whose cost is unknown (usage unreadable or model not priced): liveCostUSD is a lower bound."
    )
    unknown_saved_turns: int = _count("Replayed turns whose cost is unknown: savedUSD is a lower bound.")


class McpToolStatus(_Wire):
    """A tool of an MCP server (AgentTool spec.mcp) the run offers, as its server annotates it."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(max_length=128, description="The MCP tool's name (the agent's tool).")
    agent_tool: str = Field(max_length=253, description="The AgentTool whose server it is.")
    read_only: bool = Field(default=False, description="The server's readOnlyHint.")
    destructive: bool = Field(default=True, description="destructiveHint, by MCP's defaults (true unless read-only or said false).")
    idempotent: bool = Field(
        default=False, description="The server's idempotentHint: calling it again with the same arguments has no further effect."
    )
    approval: bool = Field(default=False, description="Whether each call waits for a human decision.")


class ApprovalStatus(_Wire):
    """One approval request of the run."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(
        max_length=128,
        description="Approval id (unguessable: a random nonce); decide with `tether approve NAMESPACE/NAME ID` or an AgentApproval.",
    )
    tool: str | None = Field(default=None, description="Tool awaiting approval.")
    prompt: str | None = Field(default=None, description="Question to the approver.")
    arguments: str | None = Field(default=None, description="The call's arguments as JSON, truncated to 1 KiB.")
    requested_at: datetime | None = Field(default=None, description="When it was requested.")
    decision: Literal["approved", "declined"] | None = Field(default=None, description="approved or declined; empty while pending.")
    by: str | None = Field(default=None, description="Who decided: the Kubernetes user who created the AgentApproval (or `timeout`).")
    decided_at: datetime | None = Field(default=None, description="When it was decided.")
    reason: str | None = Field(default=None, description="Reason given with the decision.")


class Result(_Wire):
    """The agent's final output."""

    model_config = ConfigDict(extra="ignore")

    output: str | None = Field(default=None, description="Final output, truncated to 4 KiB.")
    truncated: bool = Field(default=False, description="Whether output was truncated.")
    ref: str | None = Field(default=None, description="Key, in the Tether store, of the progress record holding the full output.")


class AgentRunStatus(_Wire):
    """What the run is doing and has done; mirrors the runtime's progress."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int = _observed_generation()
    phase: Phase | None = Field(default=None, description="Pending, Running, AwaitingApproval, Succeeded or Failed.")
    conditions: list[Condition] = _conditions()
    execution: Execution | None = Field(default=None, description="Where the run executes.")
    attempts: int | None = Field(default=None, ge=0, description="Attempts started so far.")
    steps: Steps | None = Field(default=None, description="Live and replayed steps.")
    usage: Usage | None = Field(default=None, description="Tokens and cost.")
    approvals: list[ApprovalStatus] | None = _keyed("id", "Approval requests, pending and decided.", default=None)
    result: Result | None = Field(default=None, description="The agent's final output.")
    mcp_tools: list[McpToolStatus] | None = Field(
        default=None,
        max_length=1024,
        description="The MCP servers' tools the run offers, with their annotations (AgentTool spec.mcp).",
    )
    start_time: datetime | None = Field(default=None, description="When the first attempt started.")
    completion_time: datetime | None = Field(default=None, description="When the run finished.")
