"""A throwaway Prometheus server (Debian's `prometheus` package; scripts/test.sh installs it in the
core group when missing) scraping one target every second, and its HTTP query API."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.support.kube import free_port

SCRAPE_SECONDS = 1


def prometheus_binary() -> str:
    found = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
    if found is None:
        raise RuntimeError("no prometheus binary: apt-get install prometheus (Debian's package; scripts/test.sh installs it as root)")
    return found


class Prometheus:
    def __init__(self, workdir: Path, target: str) -> None:
        self.workdir, self.target = workdir, target
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Prometheus:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        # JSON is YAML: one job, the operator's /metrics, every second.
        config.write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "evaluation_interval": f"{SCRAPE_SECONDS}s"},
                    "scrape_configs": [{"job_name": "tether-operator", "static_configs": [{"targets": [self.target]}]}],
                }
            )
        )
        self.log = self.workdir / "prometheus.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    prometheus_binary(),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--web.enable-lifecycle",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start:\n{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, ConnectionError):
            return False

    def __exit__(self, *_: Any) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; the `data` of a success, else AssertionError with Prometheus' error."""
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as r:
                doc = json.loads(r.read())
        except urllib.error.HTTPError as exc:
            doc = json.loads(exc.read() or b"{}")
        assert doc.get("status") == "success", f"{path} {params}: {doc.get('errorType')}: {doc.get('error')}"
        return doc["data"]

    def query(self, promql: str) -> dict[tuple[tuple[str, str], ...], float]:
        """An instant query: each series' labels (sorted pairs) and value."""
        data = self.api("query", query=promql)
        if data["resultType"] == "scalar":
            return {(): float(data["result"][1])}
        return {tuple(sorted(s["metric"].items())): float(s["value"][1]) for s in data["result"]}

    def value(self, promql: str) -> float:
        """The one value an aggregated query returns (0 when it returns no series)."""
        result = self.query(promql)
        assert len(result) <= 1, f"{promql}: more than one series: {result}"
        return next(iter(result.values()), 0.0)

    def scraped_after(self, moment: float) -> None:
        """Wait until the target was scraped after `moment` (epoch seconds)."""
        deadline = time.monotonic() + 30
        while True:
            targets = self.api("targets")["activeTargets"]
            last = [t.get("lastScrape", "") for t in targets if t.get("health") == "up"]
            if last and all(_epoch(s) > moment for s in last):
                return
            assert time.monotonic() < deadline, f"no successful scrape after {moment}: {targets}"
            time.sleep(0.2)


def _epoch(rfc3339: str) -> float:
    """Prometheus' timestamps (nanoseconds; fromisoformat takes at most microseconds)."""
    match = re.fullmatch(r"([^.]+?)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", rfc3339)
    assert match, rfc3339
    head, frac, zone = match.groups()
    return datetime.fromisoformat(f"{head}.{(frac or '0')[:6]}{zone.replace('Z', '+00:00')}").timestamp()
