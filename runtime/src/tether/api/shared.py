"""Shared pieces of the Tether API: the group and version, the Kubernetes value shapes (names,
quantities, durations, images, URLs) checked by pydantic and by CEL alike, the enums, the wire base
model and the parts several resources use (Secret references, resources, tolerations, conditions)."""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)
from pydantic.alias_generators import to_camel

__all__ = [
    "API_VERSION",
    "CPU",
    "DNS_LABEL",
    "DNS_SUBDOMAIN",
    "DURATION",
    "ENV_NAME",
    "GPU",
    "GROUP",
    "IMAGE_REF",
    "IMPORT_PATH",
    "LABEL_VALUE",
    "MAX_CPU",
    "MAX_DURATION",
    "MAX_INPUT",
    "MAX_INSTRUCTIONS",
    "MAX_NAME",
    "MAX_RUN_NAME",
    "MEMORY_RANGE",
    "QUANTITY",
    "SECRET_KEY",
    "VERSION",
    "BaseURL",
    "Condition",
    "Duration",
    "Framework",
    "Image",
    "LabelValue",
    "Memory",
    "ObjectName",
    "Phase",
    "Provider",
    "Resources",
    "SecretKeyRef",
    "Text",
    "Toleration",
    "parse_duration",
    "quantity_value",
]

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


class Condition(_Wire):
    """A standard Kubernetes condition (metav1.Condition)."""

    model_config = ConfigDict(extra="ignore")

    type: str = Field(max_length=316, description="Condition type, e.g. Ready or Accepted.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(default="", max_length=1024, description="CamelCase machine reason.")
    message: str = Field(default="", max_length=32768, description="Human-readable details.")
    last_transition_time: datetime | None = Field(default=None, description="When the status last changed.")
    observed_generation: int | None = Field(default=None, description="metadata.generation this condition was set for.")


def _observed_generation() -> Any:
    return Field(default=-1, description="metadata.generation last acted on; -1 until the operator has looked.")


def _keyed(key: str, description: str, **field: Any) -> Any:
    """A list whose items are unique by ``key``: the apiserver checks and merges it as a map."""
    return Field(description=description, json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]}, **field)


def _conditions() -> Any:
    return _keyed(
        "type", "Current state as conditions keyed by type (kstatus: Reconciling, Ready, Stalled).", default_factory=list, max_length=32
    )


def _count(description: str, **extra: Any) -> Any:
    """A status count: a whole number from 0, 0 until something is counted."""
    return Field(default=0, ge=0, description=description, **extra)


def _refuse_duplicates(names: list[str], what: str) -> None:
    """A list whose items must be named once: a ValueError naming every name given twice."""
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate {what} names: {', '.join(duplicates)}")


def _names_once(what: str) -> AfterValidator:
    """``Annotated[list[str], _names_once("tool")]``: a list of names (a set on the wire) that
    refuses a name given twice."""

    def check(names: list[str]) -> list[str]:
        _refuse_duplicates(names, what)
        return names

    return AfterValidator(check)
