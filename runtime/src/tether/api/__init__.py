"""The AgentRun, AgentTool and AgentApproval API: the single source of Tether's CRDs.

These pydantic models are what `tether crds` turns into `crds/*.yaml` (so every field description
here becomes `kubectl explain` text), what `tether run` validates a manifest with, and what the
operator reads specs and writes status with. On the wire (YAML, JSON, the CRDs) field names are
camelCase (`memoryKey`, `apiKeySecretRef`); in Python they are snake_case.

A check the apiserver can do is declared twice on purpose: as a pydantic constraint (so `tether run`
rejects a bad manifest offline) and, where JSON Schema cannot say it, as a CEL rule under
`x-kubernetes-validations` (so `kubectl apply` rejects it too).

One module per resource: `shared` (group, version, value shapes, enums, the parts several
resources use), `agentrun`, `agenttool`, `approval` (AgentApproval) and `manifest` (whole objects
from YAML). Every public name is importable from `tether.api`. What the operator and the runtime
process exchange (the run request, the progress record, the outcome) is `tether.contract`.
"""

from __future__ import annotations

from . import agentrun, agenttool, approval, manifest, shared
from .agentrun import *  # noqa: F403  (each module's __all__ is its public names)
from .agenttool import *  # noqa: F403
from .approval import *  # noqa: F403
from .manifest import *  # noqa: F403
from .shared import *  # noqa: F403

__all__ = [*shared.__all__, *agentrun.__all__, *agenttool.__all__, *approval.__all__, *manifest.__all__]
