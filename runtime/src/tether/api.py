"""The AgentRun and AgentTool API: the single source of Tether's CRDs.

These pydantic models are what `tether crds` turns into `crds/*.yaml` (so every field description
here becomes `kubectl explain` text), what `tether run` validates a manifest with, and what the
operator reads specs and writes status with. On the wire (YAML, JSON, the CRDs) field names are
camelCase (`memoryKey`, `apiKeySecretRef`); in Python they are snake_case.

A check the apiserver can do is declared twice on purpose: as a pydantic constraint (so `tether run`
rejects a bad manifest offline) and, where JSON Schema cannot say it, as a CEL rule under
`x-kubernetes-validations` (so `kubectl apply` rejects it too).

Besides the CRD models this module holds the two small contracts between the operator and the
runtime's executor: `ExecRequest` (the REQUEST.json of `python -m tether exec`) and `Progress`
(what the runtime publishes at `runs/<runId>/progress.json`).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from . import contract

GROUP = "tether.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# Kubernetes name and value shapes, shared by pydantic and the CRD schema.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
IMPORT_PATH = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$"
DURATION = r"^([0-9]+(ms|s|m|h))+$"
# A Kubernetes quantity (500m, +2, 1.5, 4Gi, 1e3): sign, number, suffix, as the apiserver parses it.
QUANTITY = r"^([+-]?)([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
# A label value (also what a nodeSelector value must be).
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"

# Sizes bounded so that etcd objects stay small and CEL cost estimates stay finite.
MAX_INPUT = 32 * 1024
MAX_INSTRUCTIONS = 32 * 1024
MAX_NAME = 253
# An AgentRun's name is a label value (tether.dev/run) on what executors create: at most 63.
MAX_RUN_NAME = 63


def _cel(rule: str, message: str, **extra: str) -> dict[str, Any]:
    return {"rule": rule, "message": message, **extra}


def _rules(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


# Bounds of what a pod can be given: above them (1e100 CPUs, 999Ei) or at zero memory the pod is
# accepted here and then never schedules, or is refused by the apiserver after admission. The
# largest cloud machines have under 1,000 CPUs and 32 TiB of memory; no Python runtime starts in
# less than 16Mi.
MAX_CPU = "1024"
MEMORY_RANGE = ("16Mi", "64Ti")
_CPU_MESSAGE = f"must be a Kubernetes quantity of CPUs above 0 and at most {MAX_CPU}, such as 500m or 2"
_MEMORY_MESSAGE = f"must be a Kubernetes quantity of memory from {MEMORY_RANGE[0]} to {MEMORY_RANGE[1]}, such as 512Mi or 4Gi"
_SUFFIX = {
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{
        s: Decimal(10) ** e
        for s, e in (("n", -9), ("u", -6), ("m", -3), ("", 0), ("k", 3), ("M", 6), ("G", 9), ("T", 12), ("P", 15), ("E", 18))
    },
}


def quantity_value(text: str) -> Decimal:
    """The number a Kubernetes quantity stands for (`500m` is 0.5, `1Gi` 1073741824)."""
    match = re.fullmatch(QUANTITY, text)
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, suffix = Decimal(match.group(1) + match.group(2)), match.group(4) or ""
    if suffix in _SUFFIX:
        return number * _SUFFIX[suffix]
    return number.scaleb(int(suffix[1:]))  # an exponent: 1e3


def _quantity_between(low: str | None, high: str, message: str) -> tuple[Any, dict[str, Any]]:
    """A pydantic validator and a CEL rule for a quantity in (0, high] (low None) or [low, high]:
    checked by pydantic and by the apiserver's own quantity parser, so both say it in words."""

    def check(value: str) -> str:
        try:
            number = quantity_value(value)
        except (ValueError, ArithmeticError):  # ArithmeticError: an exponent no Decimal holds
            raise ValueError(message) from None
        if not (number >= quantity_value(low) if low else number > 0) or number > quantity_value(high):
            raise ValueError(message)
        return value

    above = f"!quantity(self).isLessThan(quantity('{low}'))" if low else "quantity(self).isGreaterThan(quantity('0'))"
    rule = f"isQuantity(self) && {above} && !quantity(self).isGreaterThan(quantity('{high}'))"
    return AfterValidator(check), _rules(_cel(rule, message))


_CPU_CHECK, _CPU_RULE = _quantity_between(None, MAX_CPU, _CPU_MESSAGE)
_MEMORY_CHECK, _MEMORY_RULE = _quantity_between(*MEMORY_RANGE, _MEMORY_MESSAGE)
CPU = Annotated[str, _CPU_CHECK, Field(max_length=32, json_schema_extra=_CPU_RULE)]
Memory = Annotated[str, _MEMORY_CHECK, Field(max_length=32, json_schema_extra=_MEMORY_RULE)]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


# Free text that must say something: empty or only whitespace is refused on both sides.
Text = Annotated[str, AfterValidator(_not_blank), Field(json_schema_extra=_rules(_cel("self.trim() != ''", "must not be blank")))]


# The longest timeout: a pod's activeDeadlineSeconds is at most 2^31-1 s (68 years) and is
# refused by the apiserver after admission above that; no attempt or tool call should run a year,
# so a longer one is a typo (1000000h), said at admission.
MAX_DURATION = "8760h"
_DURATION_MESSAGE = f"must be a duration longer than zero and at most {MAX_DURATION} (a year) such as 90s, 30m or 1h30m"


def _positive_duration(value: str) -> str:
    if not re.fullmatch(DURATION, value) or not 0 < parse_duration(value) <= parse_duration(MAX_DURATION):
        raise ValueError(_DURATION_MESSAGE)
    return value


# A duration `parse_duration` reads, not zero, at most a year. CEL: the same regex, then the
# apiserver's own duration parser (a number too large for it is refused as well).
Duration = Annotated[
    str,
    AfterValidator(_positive_duration),
    Field(
        max_length=32,
        json_schema_extra=_rules(
            _cel(
                f"self.matches('{DURATION}') && self.matches('[1-9]') && duration(self) <= duration('{MAX_DURATION}')",
                _DURATION_MESSAGE,
            )
        ),
    ),
]

# A container image reference as the container runtime parses it (distribution/reference):
# [registry[:port]/]path[:tag][@digest], lowercase path components.
_PATH_PART = "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST_PART = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_REGISTRY = f"(?:{_HOST_PART}(?:\\.{_HOST_PART})*|\\[[a-fA-F0-9:]+\\])(?::[0-9]+)?"
_DIGEST = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REF = f"^(?:{_REGISTRY}/)?{_PATH_PART}(?:/{_PATH_PART})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?(?:@{_DIGEST})?$"
_IMAGE_MESSAGE = "must be a container image reference such as ghcr.io/org/agent:1.2 or registry:5000/agent@sha256:<digest>"


def _image(value: str) -> str:
    if not re.fullmatch(IMAGE_REF, value):
        raise ValueError(_IMAGE_MESSAGE)
    return value


Image = Annotated[
    str,
    AfterValidator(_image),
    Field(max_length=512, json_schema_extra=_rules(_cel("self.matches('{}')".format(IMAGE_REF.replace("\\", "\\\\")), _IMAGE_MESSAGE))),
]

_BASE_URL_MESSAGE = "must be an http:// or https:// URL with a host and no spaces, e.g. https://api.example.com/v1"
_BASE_URL_CREDENTIALS = "must not carry credentials (user:password@); give the API key with apiKeySecretRef"
# userinfo sits between `scheme://` and the first `/`, `?` or `#`.
_USERINFO = "^[^:/?#]+://[^/?#]*@"


def _base_url(value: str) -> str:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (raises on a port that is not a number in range)
    except ValueError:  # e.g. an unclosed [IPv6 literal
        raise ValueError(_BASE_URL_MESSAGE) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or re.search(r"\s", value):
        raise ValueError(_BASE_URL_MESSAGE)
    if re.match(_USERINFO, value):
        raise ValueError(_BASE_URL_CREDENTIALS)
    return value


BaseURL = Annotated[
    str,
    AfterValidator(_base_url),
    Field(
        max_length=2048,
        json_schema_extra=_rules(
            _cel(
                "isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != '' && !self.matches('\\\\s')"
                " && (url(self).getPort() == '' || int(url(self).getPort()) <= 65535)",
                _BASE_URL_MESSAGE,
            ),
            _cel(f"!self.matches('{_USERINFO}')", _BASE_URL_CREDENTIALS),
        ),
    ),
]

# Item types for lists and maps (bounded, again for CEL cost estimates).
ObjectName = Annotated[str, Field(max_length=MAX_NAME, pattern=DNS_SUBDOMAIN)]
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]


class _Wire(BaseModel):
    """Base of every API model: camelCase on the wire, snake_case in Python, unknown keys rejected.

    Numbers and booleans of a spec are `strict`: the apiserver refuses "2" for an integer and
    "yes" for a boolean, so `tether run` must too.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=True,
    )

    def wire(self) -> dict[str, Any]:
        """The camelCase JSON form, without unset optional fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def parse_duration(text: str) -> float:
    """Seconds in a duration such as `90s`, `30m`, `1h30m` or `250ms`."""
    if not re.fullmatch(DURATION, text):
        raise ValueError(f"invalid duration {text!r}: use e.g. 90s, 30m, 1h30m")
    unit = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(int(n) * unit[u] for n, u in re.findall(r"([0-9]+)(ms|s|m|h)", text))


# --------------------------------------------------------------------------------------- enums


class Framework(str, Enum):
    """The agent framework whose loop runs the agent; Tether records underneath it.

    Only frameworks with an adapter (adapters/<id>, package tether_<id>) are listed: the API
    promises only what runs. Add the member when an adapter lands (a test keeps the two in step).
    """

    OPENAI = "openai"
    LANGGRAPH = "langgraph"
    LANGCHAIN = "langchain"
    PYDANTIC_AI = "pydantic-ai"
    GOOGLE_ADK = "google-adk"
    DEEPAGENTS = "deepagents"
    MISTRAL = "mistral"
    CLAUDE = "claude"
    HERMES = "hermes"
    CREWAI = "crewai"


class Provider(str, Enum):
    """The model provider's wire protocol."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    GEMINI = "gemini"
    MISTRAL = "mistral"


# The environment variable each provider's SDKs read their API key from.
PROVIDER_KEY_ENV = contract.PROVIDER_KEY_ENV


class Phase(str, Enum):
    PENDING = "Pending"
    RUNNING = "Running"
    AWAITING_APPROVAL = "AwaitingApproval"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


# ------------------------------------------------------------------------------ shared pieces


class SecretKeyRef(_Wire):
    """A key of a Secret in the AgentRun's own namespace."""

    name: str = Field(max_length=MAX_NAME, pattern=DNS_SUBDOMAIN, description="Name of the Secret.")
    key: str = Field(max_length=MAX_NAME, pattern=SECRET_KEY, description="Key within the Secret's data.")


class GPU(_Wire):
    """GPUs for the run or tool. A type is required when count is above zero."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.count) || self.count == 0 || has(self.type)",
                    "gpu.type is required when gpu.count > 0 (e.g. type: A100)",
                )
            ]
        }
    )

    type: str | None = Field(
        default=None,
        max_length=63,
        pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$",
        description="GPU type, e.g. A100, H100 or L4; selects the matching entry of the chart's "
        "gpuNodePools (its node selector and tolerations are added to the run).",
    )
    count: int = Field(default=0, ge=0, le=16, strict=True, description="Number of GPUs.")

    @model_validator(mode="after")
    def _type_when_count(self) -> GPU:
        if self.count > 0 and not self.type:
            raise ValueError("gpu.type is required when gpu.count > 0 (e.g. type: A100)")
        return self


class Resources(_Wire):
    """Compute requested for the process that runs the agent or the tool."""

    cpu: CPU | None = Field(default=None, description=f"CPU as a Kubernetes quantity, e.g. 500m or 2; above 0, at most {MAX_CPU}.")
    memory: Memory | None = Field(
        default=None,
        description=f"Memory as a Kubernetes quantity, e.g. 512Mi or 4Gi; from {MEMORY_RANGE[0]} to {MEMORY_RANGE[1]}.",
    )
    gpu: GPU | None = Field(default=None, description="GPUs, e.g. {type: A100, count: 1}.")


_EXISTS_HAS_NO_VALUE = "value must be empty when operator is Exists"
_KEY_OR_EXISTS = "key is required unless operator is Exists (an empty key with Exists tolerates every taint)"
_SECONDS_NEED_NO_EXECUTE = "tolerationSeconds is only allowed with effect NoExecute"


class Toleration(_Wire):
    """A Kubernetes toleration, as on a Pod (the same rules as the Pod's)."""

    model_config = ConfigDict(
        json_schema_extra=_rules(
            _cel("self.operator != 'Exists' || !has(self.value) || self.value == ''", _EXISTS_HAS_NO_VALUE),
            _cel("self.operator == 'Exists' || (has(self.key) && self.key != '')", _KEY_OR_EXISTS),
            _cel("!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')", _SECONDS_NEED_NO_EXECUTE),
        )
    )

    key: str | None = Field(
        default=None, max_length=316, description="Taint key to tolerate; empty (with operator Exists) matches all keys."
    )
    operator: Literal["Exists", "Equal"] = Field(default="Equal", description="Exists matches any value; Equal matches `value`.")
    value: str | None = Field(default=None, max_length=63, pattern=LABEL_VALUE, description="Taint value to match.")
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; empty or absent matches all effects."
    )
    toleration_seconds: int | None = Field(
        default=None,
        ge=0,
        strict=True,
        description="For NoExecute: how long the pod stays bound after the taint appears.",
    )

    @model_validator(mode="after")
    def _as_kubernetes_does(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError(_EXISTS_HAS_NO_VALUE)
        if self.operator != "Exists" and not self.key:
            raise ValueError(_KEY_OR_EXISTS)
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError(_SECONDS_NEED_NO_EXECUTE)
        return self


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
    tools: list[ObjectName] = Field(
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

    @field_validator("tools")
    @classmethod
    def _unique_tools(cls, tools: list[str]) -> list[str]:
        duplicates = sorted({t for t in tools if tools.count(t) > 1})
        if duplicates:
            raise ValueError(f"duplicate tool names: {', '.join(duplicates)}")
        return tools

    @model_validator(mode="after")
    def _byo_agent_brings_its_own(self) -> AgentRunSpec:
        if self.agent and (self.tools or self.instructions):  # a field nothing implements is refused
            raise ValueError(BYO_AGENT_OWN_TOOLS)
        return self

    @property
    def timeout_seconds(self) -> float:
        return parse_duration(self.timeout)


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


CACHE_WITH_APPROVAL = (
    "cache: auto would return results cached by earlier runs without asking for approval; "
    "set cache: off, or approval.cachedWithoutApproval: true to allow it"
)


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
                )
            ]
        }
    )

    description: Text = Field(
        min_length=1,
        max_length=4096,
        description="What the tool does; the model reads this to decide when to call it.",
    )
    implementation: str = Field(
        max_length=512,
        pattern=IMPORT_PATH,
        description="The function, as `module:function` importable in the image.",
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
        "Default: auto, or off for a tool that requires approval; cache: auto with approval "
        "required is refused unless approval.cachedWithoutApproval is true.",
    )
    approval: Approval | None = Field(default=None, description="Human approval of each call.")
    env: list[EnvFromSecret] | None = Field(
        default=None,
        max_length=64,
        description="Environment variables from Secrets; each name at most once.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    @field_validator("env")
    @classmethod
    def _unique_env(cls, env: list[EnvFromSecret] | None) -> list[EnvFromSecret] | None:
        names = [e.name for e in env or []]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate env names: {', '.join(duplicates)}")
        return env

    @property
    def approval_required(self) -> bool:
        return self.approval is not None and self.approval.required

    @property
    def effective_cache(self) -> Literal["auto", "off"]:
        """The cache setting in force: the spec's, else off for an approval-required tool, else auto."""
        return self.cache or ("off" if self.approval_required else "auto")

    @model_validator(mode="after")
    def _cache_needs_decision(self) -> AgentToolSpec:
        if self.cache == "auto" and self.approval is not None and self.approval.required and not self.approval.cached_without_approval:
            raise ValueError(CACHE_WITH_APPROVAL)
        return self


# -------------------------------------------------------------------------------------- status


class Condition(_Wire):
    """A standard Kubernetes condition (metav1.Condition)."""

    model_config = ConfigDict(extra="ignore")

    type: str = Field(max_length=316, description="Condition type, e.g. Ready or Accepted.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(default="", max_length=1024, description="CamelCase machine reason.")
    message: str = Field(default="", max_length=32768, description="Human-readable details.")
    last_transition_time: datetime | None = Field(default=None, description="When the status last changed.")
    observed_generation: int | None = Field(default=None, description="metadata.generation this condition was set for.")


def _conditions() -> Any:
    return Field(
        default_factory=list,
        max_length=32,
        description="Current state as conditions keyed by type (kstatus: Reconciling, Ready, Stalled).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


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

    model_live: int = Field(default=0, ge=0, description="Model turns called live.")
    model_replayed: int = Field(default=0, ge=0, description="Model turns replayed.")
    tool_live: int = Field(default=0, ge=0, description="Tool calls executed.")
    tool_replayed: int = Field(default=0, ge=0, description="Tool calls replayed.")
    normalised_parts: int = Field(
        default=0,
        ge=0,
        description="Volatile parts of model requests (a CLI's date, kernel, working directory) left out of their fingerprints.",
    )
    first_divergence: Divergence | None = Field(
        default=None,
        description="First step at which a retry sent a request not in the journal (a cache miss, not an error).",
    )
    turns: str | None = Field(default=None, description="Model turns as live/replayed (for the printer column).")


class Usage(_Wire):
    """Tokens and cost as read from the provider's responses."""

    model_config = ConfigDict(extra="ignore")

    input_tokens: int = Field(default=0, ge=0, description="Input tokens, all turns.")
    output_tokens: int = Field(default=0, ge=0, description="Output tokens, all turns.")
    cached_input_tokens: int = Field(default=0, ge=0, description="Input tokens the provider served from its cache.")
    cache_write_tokens: int = Field(default=0, ge=0, description="Input tokens written to the provider's cache.")
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
    run_unknown_cost_turns: int = Field(
        default=0,
        ge=0,
        alias="runUnknownCostTurns",
        description="Live turns of unknown cost over every attempt so far: runLiveCostUSD is a lower bound.",
    )
    live_tokens: int = Field(default=0, ge=0, description="Tokens of the turns called live.")
    replayed_tokens: int = Field(default=0, ge=0, description="Tokens of the turns replayed from the journal.")
    unpriced_models: list[str] = Field(default_factory=list, max_length=32, description="Models with no price: their cost is not counted.")
    unknown_cost_turns: int = Field(
        default=0,
        ge=0,
        description="Live turns whose cost is unknown (usage unreadable or model not priced): liveCostUSD is a lower bound.",
    )
    unknown_saved_turns: int = Field(
        default=0,
        ge=0,
        description="Replayed turns whose cost is unknown: savedUSD is a lower bound.",
    )


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

    observed_generation: int = Field(
        default=-1,
        description="metadata.generation last acted on; -1 until the operator has looked.",
    )
    phase: Phase | None = Field(default=None, description="Pending, Running, AwaitingApproval, Succeeded or Failed.")
    conditions: list[Condition] = _conditions()
    execution: Execution | None = Field(default=None, description="Where the run executes.")
    attempts: int | None = Field(default=None, ge=0, description="Attempts started so far.")
    steps: Steps | None = Field(default=None, description="Live and replayed steps.")
    usage: Usage | None = Field(default=None, description="Tokens and cost.")
    approvals: list[ApprovalStatus] | None = Field(
        default=None,
        description="Approval requests, pending and decided.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"]},
    )
    result: Result | None = Field(default=None, description="The agent's final output.")
    start_time: datetime | None = Field(default=None, description="When the first attempt started.")
    completion_time: datetime | None = Field(default=None, description="When the run finished.")


class AgentToolStatus(_Wire):
    """Whether the tool is usable."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int = Field(
        default=-1,
        description="metadata.generation last acted on; -1 until the operator has looked.",
    )
    conditions: list[Condition] = _conditions()


# ------------------------------------------------------------------------------ AgentApproval

#: An approval id as the runtime writes it (``tether.approvals``): a 12-hex slot and a nonce.
APPROVAL_ID = r"^[0-9a-f]{12,64}$"


class AgentApprovalSpec(_Wire):
    """A decision on one pending approval request of an AgentRun, made by whoever creates it."""

    run: str = Field(max_length=MAX_RUN_NAME, pattern=DNS_SUBDOMAIN, description="Name of the AgentRun, in this namespace.")
    approval_id: str = Field(
        max_length=64, pattern=APPROVAL_ID, description="Id of the pending request, from the run's status.approvals (or its Event)."
    )
    decision: Literal["approve", "decline"] = Field(description="approve runs the call; decline hands the model a refusal.")
    reason: str | None = Field(default=None, max_length=1024, description="Why; recorded with the decision.")
    decided_by: str = Field(
        max_length=512,
        description="Who decides: must be the Kubernetes user creating this object (`kubectl auth whoami`), checked at "
        "admission by the chart's ValidatingAdmissionPolicy. Recorded as the run's approver.",
    )


class AgentApprovalStatus(_Wire):
    """Whether the operator applied the decision (condition Applied, with the reason if not)."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int = Field(
        default=-1,
        description="metadata.generation last acted on; -1 until the operator has looked.",
    )
    conditions: list[Condition] = _conditions()


# ------------------------------------------------------------------------------------ manifests


class ObjectMeta(_Wire):
    """The parts of Kubernetes object metadata Tether reads; the rest is kept as is."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(max_length=MAX_NAME, pattern=DNS_SUBDOMAIN)
    namespace: str | None = Field(default=None, max_length=63, pattern=DNS_LABEL)
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class RunMeta(ObjectMeta):
    """An AgentRun's metadata: its name is a label value on what the run creates (at most 63)."""

    name: str = Field(max_length=MAX_RUN_NAME, pattern=DNS_SUBDOMAIN)


class AgentRunManifest(_Wire):
    """A whole AgentRun object: a one-off run of an agent."""

    api_version: Literal["tether.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["AgentRun"]
    metadata: RunMeta
    spec: AgentRunSpec
    status: AgentRunStatus | None = None


class AgentToolManifest(_Wire):
    """A whole AgentTool object: a tool agents in its namespace may call."""

    api_version: Literal["tether.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["AgentTool"]
    metadata: ObjectMeta
    spec: AgentToolSpec
    status: AgentToolStatus | None = None


Manifest = AgentRunManifest | AgentToolManifest
_KINDS: dict[str, type[BaseModel]] = {"AgentRun": AgentRunManifest, "AgentTool": AgentToolManifest}


class ManifestError(ValueError):
    """A manifest that is not a valid AgentRun or AgentTool; the message lists every problem."""


def validation_problems(exc: ValidationError, prefix: str = "") -> list[str]:
    """`field.path: message` per error, with camelCase paths and without pydantic's boilerplate."""
    out = []
    for err in exc.errors():
        where = ".".join([prefix, *(str(p) for p in err["loc"])] if prefix else [str(p) for p in err["loc"]]) or "(document)"
        message = err["msg"].removeprefix("Value error, ")
        out.append(f"{where}: {message}")
    return out


def _describe(exc: ValidationError) -> str:
    return "\n".join(f"  {line}" for line in validation_problems(exc))


SpecT = TypeVar("SpecT", bound=BaseModel)


def read_spec(model: type[SpecT], spec: Any) -> SpecT:
    """Validate a spec read from the cluster; a ManifestError names each field as `spec.<field>`.

    The apiserver checks what the CRD can say; whatever gets past it (an object stored under an
    older CRD, a rule only the runtime knows) is reported in these words, not as a pydantic dump.
    """
    try:
        return model.model_validate(spec)
    except ValidationError as exc:
        raise ManifestError("; ".join(validation_problems(exc, "spec"))) from None


def parse_manifest(doc: Any, source: str = "manifest") -> Manifest:
    """Validate one decoded YAML/JSON document as an AgentRun or AgentTool."""
    if not isinstance(doc, dict):
        raise ManifestError(f"{source}: expected a mapping, got {type(doc).__name__}")
    if doc.get("apiVersion") != API_VERSION:
        raise ManifestError(f"{source}: apiVersion must be {API_VERSION}, got {doc.get('apiVersion')!r}")
    model = _KINDS.get(doc.get("kind"))  # type: ignore[arg-type]
    if model is None:
        raise ManifestError(f"{source}: kind must be AgentRun or AgentTool, got {doc.get('kind')!r}")
    try:
        return model.model_validate(doc)  # type: ignore[return-value]
    except ValidationError as exc:
        raise ManifestError(f"{source}: invalid {doc['kind']}:\n{_describe(exc)}") from exc


def _is_file(text: str) -> bool:
    if "\n" in text or not text.strip():
        return False
    try:
        return Path(text).is_file()
    except OSError:  # e.g. a name too long for the filesystem: it is text
        return False


def load_manifests(path_or_text: str | Path) -> list[Manifest]:
    """Every AgentRun/AgentTool in a YAML or JSON file (or text); empty documents are skipped."""
    source, text = "manifest", str(path_or_text)
    if isinstance(path_or_text, Path) or _is_file(path_or_text):
        source, text = str(path_or_text), Path(path_or_text).read_text()
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ManifestError(f"{source}: not valid YAML: {exc}") from exc
    if not docs:
        raise ManifestError(f"{source}: no document found")
    return [parse_manifest(d, f"{source} (document {i + 1})" if len(docs) > 1 else source) for i, d in enumerate(docs)]


def load_manifest(path_or_text: str | Path) -> Manifest:
    """The single AgentRun/AgentTool in a file or text; raises ManifestError with every problem."""
    manifests = load_manifests(path_or_text)
    if len(manifests) != 1:
        raise ManifestError(f"expected one document, found {len(manifests)}; use load_manifests")
    return manifests[0]


# ---------------------------------------------------------------- operator <-> runtime contract


class ExecRequest(_Wire):
    """REQUEST.json of `python -m tether exec REQUEST.json --store URL`."""

    model_config = ConfigDict(extra="ignore")

    run_id: str = Field(description="The AgentRun's uid: the journal's scope.")
    namespace: str
    name: str
    spec: AgentRunSpec
    tools: dict[str, AgentToolSpec] = Field(default_factory=dict)


class ProgressApproval(_Wire):
    model_config = ConfigDict(extra="ignore")

    id: str
    tool: str | None = None
    prompt: str | None = None
    arguments: Any = None
    requested_at: datetime | str | None = None
    decision: str | None = None
    by: str | None = None
    decided_at: datetime | str | None = None
    reason: str | None = None

    def status(self) -> ApprovalStatus:
        args = self.arguments
        if args is not None and not isinstance(args, str):
            args = json.dumps(args, sort_keys=True, default=str)
        return ApprovalStatus(
            id=self.id,
            tool=self.tool,
            prompt=self.prompt,
            arguments=args[:1024] if args is not None else None,
            requested_at=self.requested_at or None,
            decision=self.decision or None,
            by=self.by,
            decided_at=self.decided_at or None,
            reason=self.reason,
        )


class Progress(_Wire):
    """The runtime's progress record at `runs/<runId>/progress.json` (rewritten on each step)."""

    model_config = ConfigDict(extra="ignore")

    phase: str | None = None
    attempt: int = 0
    steps: Steps = Field(default_factory=Steps)
    usage: Usage = Field(default_factory=Usage)
    approvals: list[ProgressApproval] = Field(default_factory=list)
    result: Any = None
    result_truncated: bool = False
    error: Any = None
    updated_at: datetime | float | str | None = None

    @field_validator("steps", "usage", mode="before")
    @classmethod
    def _none_is_empty(cls, v: Any) -> Any:
        return {} if v is None else v

    @field_validator("approvals", mode="before")
    @classmethod
    def _none_is_no_approvals(cls, v: Any) -> Any:
        return [] if v is None else v

    def pending_approvals(self) -> list[ProgressApproval]:
        return [a for a in self.approvals if not a.decision]
