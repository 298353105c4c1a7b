"""`python -m tether_operator` / `tether-operator`: run the operator (settings from the environment).

TETHER_NAMESPACES      comma-separated namespaces to serve
TETHER_CLUSTER_WIDE    true: serve every namespace but kube-system, kube-public, kube-node-lease
TETHER_STORE_URL       the store shared with the runtime (file:///dir or s3://bucket/prefix?...)
TETHER_EXECUTOR        local (default)
TETHER_CONCURRENCY     executions at once (local executor)
TETHER_WORKDIR         scratch directory for request files and attempt logs
TETHER_GPU_NODE_POOLS  JSON: GPU type -> {nodeSelector, tolerations}
TETHER_HEALTH_PORT     liveness endpoint port (default 8080; 0 disables)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import kopf

from . import kube
from .handlers import build_registry
from .settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tether-operator", description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings = Settings.from_env()
    if error := settings.startup_error():
        parser.error(error)
    kube.configure()
    port = int(os.environ.get("TETHER_HEALTH_PORT", "8080"))
    kopf.run(
        registry=build_registry(settings),
        memo=kopf.Memo(settings=settings),
        standalone=True,
        namespaces=list(settings.namespaces),
        clusterwide=settings.cluster_wide,
        liveness_endpoint=f"http://0.0.0.0:{port}/healthz" if port else None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
