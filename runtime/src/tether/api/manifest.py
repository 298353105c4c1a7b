"""Manifests: whole AgentRun and AgentTool objects read from YAML or JSON (``tether run``), and
the errors that name every problem of a spec read from a manifest or the cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
)

from .agentrun import AgentRunSpec, AgentRunStatus
from .agenttool import AgentToolSpec, AgentToolStatus
from .shared import API_VERSION, DNS_LABEL, DNS_SUBDOMAIN, MAX_NAME, MAX_RUN_NAME, _Wire

__all__ = [
    "AgentRunManifest",
    "AgentToolManifest",
    "Manifest",
    "ManifestError",
    "ObjectMeta",
    "RunMeta",
    "SpecT",
    "load_manifest",
    "load_manifests",
    "parse_manifest",
    "read_spec",
    "validation_problems",
]

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


class _Object(_Wire):
    """What every whole Tether object starts with: the API version (``kind`` is each one's)."""

    api_version: Literal["tether.dev/v1alpha1"] = Field(alias="apiVersion")


class AgentRunManifest(_Object):
    """A whole AgentRun object: a one-off run of an agent."""

    kind: Literal["AgentRun"]
    metadata: RunMeta
    spec: AgentRunSpec
    status: AgentRunStatus | None = None


class AgentToolManifest(_Object):
    """A whole AgentTool object: a tool agents in its namespace may call."""

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
    import yaml  # here: a runner pod (`tether exec`) reads JSON and never needs it

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
