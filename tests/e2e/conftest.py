"""The kind e2e suite runs only from tests/e2e/run.sh (which sets TETHER_E2E=1 and a kubeconfig of
its cluster); in the normal suite these files are not collected at all."""

import os

if os.environ.get("TETHER_E2E") != "1":
    collect_ignore_glob = ["test_*.py"]
