"""Generate the AgentRun, AgentTool and AgentApproval CRDs from `tether.api` (`tether crds [--check] [--out DIR]`).

In a checkout it also writes the field reference, docs/reference/manifests.md, from the same
schemas (every field: type, default, bounds, description), and the Python API reference,
docs/reference/python.md, from the docstrings (`python_reference`); `--check` covers both.

The pydantic models are the only source. Their JSON Schema is rewritten into a Kubernetes
structural schema: `$ref`s inlined, `Optional` unwrapped, titles dropped, `const` turned into
`enum`; descriptions, bounds, patterns, defaults and `x-kubernetes-*` keys are kept. The files
are written to `crds/` and, byte for byte, to the Helm chart's `files/crds/` (the chart's
templates add the keep policy and the `crds.enabled` switch). `--check` regenerates in memory and
exits 1 on any difference, naming the command that fixes it.

It lives in the operator's distribution, not the runtime's: the CRDs are what the chart installs
for the operator; an agent's image has no use for them. `tether crds` runs it where the operator
is installed (every environment of this repository).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from tether import api, contract

from . import python_reference

HEADER = (
    "# generated from tether.api by `tether crds`; do not edit.\n# Regenerate with `tether crds` (a test runs `tether crds --check`).\n"
)

_REPO = Path(__file__).resolve().parents[3]  # operator/src/tether_operator/crds.py -> repository root

# JSON Schema keywords a structural schema may carry, copied as they are.
_KEEP = {
    "type",
    "description",
    "enum",
    "format",
    "pattern",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
}


# Key order in the generated YAML, so a reviewer reads type and description first.
_ORDER = {
    k: i
    for i, k in enumerate(
        [
            "type",
            "description",
            "default",
            "enum",
            "format",
            "pattern",
            "minLength",
            "maxLength",
            "minimum",
            "exclusiveMinimum",
            "maximum",
            "exclusiveMaximum",
            "minItems",
            "maxItems",
            "minProperties",
            "maxProperties",
            "required",
            "properties",
            "items",
            "additionalProperties",
        ]
    )
}


def _convert(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    node = dict(node)
    # Unwrap references and Optional[...] into the one schema they stand for; the field's own
    # keywords (description, default) win over the referenced model's.
    if "$ref" in node:
        target = defs[node.pop("$ref").split("/")[-1]]
        return _ordered({**_convert(target, defs), **_convert(node, defs)})
    for key in ("allOf", "anyOf", "oneOf"):
        if key in node:
            options = [o for o in node.pop(key) if o.get("type") != "null"]
            if len(options) != 1:
                raise ValueError(f"cannot express a union of {len(options)} types in a CRD: {options}")
            return _ordered({**_convert(options[0], defs), **_convert(node, defs)})

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _KEEP:
            out[key] = value
        elif key == "const":
            out["enum"] = [value]
        elif key == "default":
            # None and empty collections are what "absent" means already; keep the object clean.
            if value not in (None, [], {}):
                out["default"] = value
        elif key == "exclusiveMinimum":  # JSON Schema 2020 number -> OpenAPI 3.0 boolean form
            out["minimum"], out["exclusiveMinimum"] = value, True
        elif key == "exclusiveMaximum":
            out["maximum"], out["exclusiveMaximum"] = value, True
        elif key == "properties":
            out["properties"] = {k: _convert(v, defs) for k, v in value.items()}
        elif key == "items":
            out["items"] = _convert(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict):  # a map; `false` (closed object) is implied by structural schemas
                out["additionalProperties"] = _convert(value, defs)
        elif key.startswith("x-kubernetes-"):
            out[key] = copy.deepcopy(value)
        # title, $defs, examples...: not for the apiserver
    return _ordered(out)


def _ordered(schema: dict[str, Any]) -> dict[str, Any]:
    return dict(sorted(schema.items(), key=lambda kv: _ORDER.get(kv[0], len(_ORDER))))


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of one API model."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _convert(raw, raw.pop("$defs", {}))


def _crd(
    kind: str,
    plural: str,
    short: str,
    spec: type[BaseModel],
    status: type[BaseModel],
    max_name: int | None = None,
) -> dict[str, Any]:
    # The kind's rows of _COLUMNS as printer columns, Age last.
    columns = [dict(zip(("name", "type", "jsonPath", "description"), c, strict=False)) for c in _COLUMNS[kind]]
    columns.append({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})
    spec_schema = schema_of(spec)
    spec_schema["x-kubernetes-validations"] = [
        {
            "rule": "self == oldSelf",
            "message": f"spec is immutable: create a new {kind} instead of changing this one",
        },
        *spec_schema.get("x-kubernetes-validations", []),  # the spec model's own rules
    ]
    status_schema = schema_of(status)
    # An object's status starts out as {} so that observedGeneration reads -1 (not "done")
    # before the operator has looked at it (kstatus).
    status_schema["default"] = {}
    # A CRD may bound metadata.name (and nothing else of metadata): "metadata.name: Too long".
    metadata: dict[str, Any] = {"type": "object"}
    if max_name is not None:
        metadata["properties"] = {"name": {"type": "string", "maxLength": max_name}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{api.GROUP}",
            "labels": {"app.kubernetes.io/part-of": "tether"},
        },
        "spec": {
            "group": api.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
                "categories": ["tether"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": _DOCS[kind],
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string", "description": "tether.dev/v1alpha1"},
                                "kind": {"type": "string", "description": kind},
                                "metadata": metadata,
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


#: What each kind is: its CRD's description.
_DOCS = {
    "AgentRun": "AgentRun runs an agent once, durably: model turns and tool calls are journaled so a "
    "retry replays finished work. The spec is immutable; a new run is a new object.",
    "AgentTool": "AgentTool declares a tool (a Python function) that AgentRuns in its namespace may "
    "call, where it runs and whether a human must approve each call.",
    "AgentApproval": "AgentApproval decides one pending approval request of an AgentRun. Its creator is the "
    "approver: spec.decidedBy must be their Kubernetes identity (the chart's admission policy), "
    "and who may approve is who may create AgentApprovals. The spec is immutable; the first "
    "decision on a request wins.",
}

#: The columns ``kubectl get`` prints for each kind, before Age: (name, type, JSON path[, description]).
_COLUMNS: dict[str, list[tuple[str, ...]]] = {
    "AgentRun": [
        ("Phase", "string", ".status.phase"),
        ("Framework", "string", ".spec.framework"),
        ("Model", "string", ".spec.model.name"),
        ("Turns", "string", ".status.steps.turns", "Model turns, live/replayed"),
        ("Cost", "number", ".status.usage.costUSD", "Cost in US dollars"),
    ],
    "AgentTool": [
        ("Implementation", "string", ".spec.implementation"),
        ("Approval", "boolean", ".spec.approval.required"),
        ("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
    ],
    "AgentApproval": [
        ("Run", "string", ".spec.run"),
        ("Approval", "string", ".spec.approvalId"),
        ("Decision", "string", ".spec.decision"),
        ("By", "string", ".spec.decidedBy"),
        ("Applied", "string", '.status.conditions[?(@.type=="Applied")].reason'),
    ],
}


def render() -> dict[str, str]:
    """File name -> YAML text of every CRD."""
    crds = [
        _crd("AgentRun", "agentruns", "ar", api.AgentRunSpec, api.AgentRunStatus, max_name=api.MAX_RUN_NAME),
        _crd("AgentTool", "agenttools", "at", api.AgentToolSpec, api.AgentToolStatus),
        _crd("AgentApproval", contract.APPROVAL_PLURAL, "aa", api.AgentApprovalSpec, api.AgentApprovalStatus),
    ]
    return {
        f"{api.GROUP}_{crd['spec']['names']['plural']}.yaml": HEADER + yaml.safe_dump(crd, sort_keys=False, width=100, allow_unicode=True)
        for crd in crds
    }


REFERENCE = Path("docs") / "reference" / "manifests.md"
PYTHON_REFERENCE = Path("docs") / "reference" / "python.md"

#: Each kind with the names of its spec and status models in tether.api (looked up when rendered).
_KINDS = (
    ("AgentRun", "AgentRunSpec", "AgentRunStatus"),
    ("AgentTool", "AgentToolSpec", "AgentToolStatus"),
    ("AgentApproval", "AgentApprovalSpec", "AgentApprovalStatus"),
)


def _type(node: dict[str, Any]) -> str:
    """A schema's type as the reference shows it: ``string``, ``array of object``, ``map of string``."""
    kind = str(node.get("type", "any"))
    if kind == "array":
        return f"array of {_type(node.get('items', {}))}"
    if kind == "object" and "additionalProperties" in node and "properties" not in node:
        return f"map of {_type(node['additionalProperties'])}"
    return kind + (f" ({node['format']})" if "format" in node else "")


def _bounds(node: dict[str, Any]) -> str:
    """What the apiserver enforces on a value besides its type."""
    out = []
    if "enum" in node:
        out.append("one of " + ", ".join(f"`{v}`" if v != "" else '`""` (empty)' for v in node["enum"]))
    for key, word in (("minimum", ">"), ("maximum", "<")):
        if key in node:
            exclusive = node.get("exclusiveM" + key[1:])
            out.append(f"{word}{'' if exclusive else '='} {node[key]}")
    for low, high, what in (
        ("minLength", "maxLength", "characters"),
        ("minItems", "maxItems", "items"),
        ("minProperties", "maxProperties", "keys"),
    ):
        if low in node or high in node:
            lo, hi = node.get(low), node.get(high)
            out.append(
                f"{lo}–{hi} {what}"
                if lo is not None and hi is not None
                else f"at least {lo} {what}"
                if lo is not None
                else f"at most {hi} {what}"
            )
    if "pattern" in node:
        out.append(f"matches `{node['pattern']}`")
    for rule in node.get("x-kubernetes-validations", []):
        if rule.get("message") and "immutable" not in rule["message"]:
            out.append(rule["message"].rstrip("."))
    return "; ".join(out)


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _rows(node: dict[str, Any], path: str) -> list[str]:
    rows = []
    required = set(node.get("required", []))
    for name, child in node.get("properties", {}).items():
        field = f"{path}.{name}"
        default = f"`{json.dumps(child['default'])}`" if "default" in child else ("required" if name in required else "")
        rows.append(f"| `{field}` | {_type(child)} | {default} | {_cell(_bounds(child))} | {_cell(child.get('description', ''))} |")
        items = child.get("items", {})
        rows += _rows(child, field) + (_rows(items, field + "[]") if items.get("properties") else [])
        if "properties" in child.get("additionalProperties", {}):
            rows += _rows(child["additionalProperties"], field + ".<key>")
    return rows


def render_reference() -> str:
    """docs/reference/manifests.md: every field of every kind, from the CRDs' own schemas."""
    out = [
        "# Manifest field reference",
        "",
        "<!-- generated from tether.api by `tether crds`; do not edit (a test runs `tether crds --check`). -->",
        "",
        f"Every field of the `{api.GROUP}/{api.VERSION}` kinds, as the CRDs (crds/) declare them and",
        "`tether run` checks them offline: type, default, what the apiserver enforces (bounds), and what it",
        "does. `kubectl explain agentrun.spec.model` shows the same text. A field not listed is refused.",
        "The descriptions are the pydantic field descriptions in runtime/src/tether/api/.",
        "",
    ]
    out += [f"- [{kind}](#{kind.lower()})" for kind, _, _ in _KINDS]
    out.append("")
    header = ["| field | type | default | bounds | description |", "|---|---|---|---|---|"]
    for kind, spec_name, status_name in _KINDS:
        spec, status = schema_of(getattr(api, spec_name)), schema_of(getattr(api, status_name))
        out += [f"## {kind}", "", _cell(spec.get("description", "")), "", "### spec", "", *header, *_rows(spec, "spec"), ""]
        out += ["### status", "", "Written by the operator; read it with `kubectl get -o yaml` or `tether status`.", "", *header]
        out += [*_rows(status, "status"), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tether crds", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the files are out of date")
    parser.add_argument("--out", type=Path, default=None, help="directory (default: the repo's crds/)")
    parser.add_argument(
        "--chart",
        type=Path,
        default=None,
        help="Helm chart whose files/crds/ gets a copy (default: the repo's charts/tether when --out is not given)",
    )
    args = parser.parse_args(argv)
    dirs = [args.out] if args.out else [_REPO / "crds"]
    chart = args.chart or (None if args.out else _REPO / "charts" / "tether")
    if chart is not None and chart.is_dir():
        dirs.append(chart / "files" / "crds")

    outputs = {d / name: text for d in dirs for name, text in render().items()}
    if not args.out and (_REPO / "docs").is_dir():  # a checkout: the references beside them
        outputs[_REPO / REFERENCE] = render_reference()
        outputs[_REPO / PYTHON_REFERENCE] = python_reference.render(_REPO)
    stale = []
    for path, text in outputs.items():
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        for path in stale:
            print(f"{path} is out of date with tether.api", file=sys.stderr)
        fix = "tether crds" + (f" --out {args.out}" if args.out else "")
        print(f"run `{fix}` to regenerate", file=sys.stderr)
        return 1
    if not args.check:
        print("wrote " + ", ".join(str(path) for path in outputs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
