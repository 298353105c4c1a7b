"""One fake-provider script for every example: each example's own script (examples/*/NAME.script.yaml,
the same for every framework), matched by the example's input, so one in-cluster fake provider
answers them all. Prints YAML."""

import sys
from pathlib import Path

import yaml


def merged(examples: Path) -> dict:
    conversations, seen = [], set()
    for manifest in sorted(examples.glob("*/*.yaml")):
        if manifest.name.endswith(".script.yaml"):
            continue
        docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d and d.get("kind") == "AgentRun"]
        script = manifest.with_name(f"{manifest.stem}.script.yaml")
        if not docs or not script.exists() or manifest.stem in seen:
            continue
        seen.add(manifest.stem)
        for conversation in yaml.safe_load(script.read_text())["conversations"]:
            conversations.append({**conversation, "match": docs[0]["spec"]["input"]})
    return {"conversations": conversations}


if __name__ == "__main__":
    yaml.safe_dump(merged(Path(sys.argv[1])), sys.stdout, sort_keys=False)
