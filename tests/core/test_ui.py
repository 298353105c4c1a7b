"""`tether ui` in headless Chromium (Debian's chromium and chromium-driver, driven by selenium):
a run killed from outside with SIGKILL and resumed, as its pages show it.

The run is the weather example with a tool of this test's own that needs a Secret (given to
`tether run` as $TETHER_SECRETS, as the local executor does) and logs each execution. The first
attempt is SIGKILLed by the test right after its tool call was recorded; `tether run` starts the
second, which replays the turn and the tool and finishes live. Then `tether ui` serves the store
and the browser reads it. Checked on the pages: the runs list (phase, framework, attempt 2, cost
live and saved); the run page (2 attempts, the killed one with its live steps, the second with
the turn and the tool marked replayed, the tool live exactly once on the page as in its log, the
dollars saved); no Secret value on any page, with message content off or on; content only when
switched on; the server answers only requests addressed to it by name; viewing writes nothing.
Beside it: the refund example (a tool error with its cause; the approval with who decided and
why; the refund run once, after it) and a run resumed from a changed input (the first
divergence). Screenshots go to the test's tmp dir.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tether.journal import read_records
from tether.stores import open_store

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "openai"
SECRET = "wx-token-5b1c9e0d7a"
CHROMEDRIVER = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")

TOOLS = '''
import os
import time

import tether


def get_weather(city: str) -> str:
    """Current weather in a city."""
    if not tether.secret("WEATHER_TOKEN"):  # its Secret, there during its own calls only
        raise RuntimeError("no WEATHER_TOKEN")
    with open(os.environ["UI_TOOL_LOG"], "a") as log:
        log.write(city + "\\n")
    time.sleep(0.2)
    return f"{city}: sunny, 21 C, light wind from the west."
'''


def tether(*args: str, **kwargs) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k not in ("TETHER_COMMAND", "TETHER_ENV")}
    env = {**clean, "OPENAI_AGENTS_DISABLE_TRACING": "1", **kwargs.pop("env", {})}
    return subprocess.Popen(["./tether", *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory) -> Iterator[tuple[Path, Path, str]]:
    """The store of a run whose first attempt was SIGKILLed after its tool call; the tool's log."""
    work = tmp_path_factory.mktemp("ui-run")
    shutil.copy(EXAMPLES / "weather.script.yaml", work / "weather.script.yaml")
    (work / "ui_tools.py").write_text(TOOLS)
    docs = list(yaml.safe_load_all((EXAMPLES / "weather.yaml").read_text()))
    next(d for d in docs if d["kind"] == "AgentTool")["spec"].update(
        implementation="ui_tools:get_weather",
        cache="off",
        env=[{"name": "WEATHER_TOKEN", "secretKeyRef": {"name": "weather", "key": "token"}}],
    )
    (work / "weather.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    store, log = work / "store", work / "tool.log"
    secrets = json.dumps({"tools": {"get-weather": {"WEATHER_TOKEN": SECRET}}})
    env = {"TETHER_SECRETS": secrets, "UI_TOOL_LOG": str(log)}
    proc = tether("run", str(work / "weather.yaml"), "--store", str(store), "--no-warm", env=env)
    # `tether run` prints an attempt's steps when it ends: the journal says when the tool call is
    # recorded. Then the attempt's process (--no-warm: no spare beside it) is killed from outside.
    deadline = time.monotonic() + 120
    while not any(r.kind == "tool" for r in read_records(open_store(str(store)), "weather-openai")):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before its tool call was recorded"
        time.sleep(0.01)
    (attempt,) = children(proc.pid)
    os.kill(attempt, signal.SIGKILL)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "the agent process died (signal 9); starting it again" in out and "attempt 2:" in out, out
    yield store, log, out


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    driver_path = next((p for p in CHROMEDRIVER if Path(p).exists()), None)
    assert driver_path, "no chromedriver: apt-get install chromium chromium-driver (scripts/test.sh does, as root)"
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def ui(killed_and_resumed) -> Iterator[Callable[..., str]]:
    started: list[subprocess.Popen[str]] = []

    def start(*flags: str, env: dict[str, str] | None = None) -> str:
        proc = tether("ui", "--port", "0", "--store", str(killed_and_resumed[0]), *flags, env=env or {})
        started.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert match, line + (proc.stdout.read() if proc.poll() is not None else "")
        return match.group(0)

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(10)


def test_a_killed_and_resumed_run_in_the_browser(killed_and_resumed, browser, ui, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    store, log, _ = killed_and_resumed
    assert log.read_text().splitlines() == ["Paris"]  # the tool ran once over both attempts
    before = {p: p.stat().st_mtime_ns for p in store.rglob("*") if p.is_file()}
    url = ui()
    browser.get(url)
    browser.save_screenshot(str(tmp_path / "runs-list.png"))
    (row,) = browser.find_elements(By.CSS_SELECTOR, "tr.run")
    assert row.find_element(By.CSS_SELECTOR, ".phase").text == "Succeeded"
    assert row.find_element(By.CSS_SELECTOR, ".framework").text == "openai"
    assert row.find_element(By.CSS_SELECTOR, ".attempt").text == "2"
    assert float(row.find_element(By.CSS_SELECTOR, ".cost").text.lstrip("$")) > 0
    assert float(row.find_element(By.CSS_SELECTOR, ".saved").text.lstrip("$")) > 0

    row.find_element(By.TAG_NAME, "a").click()
    browser.save_screenshot(str(tmp_path / "run.png"))
    assert browser.find_element(By.CSS_SELECTOR, ".attempts").text == "2"
    first, second = browser.find_elements(By.CSS_SELECTOR, "section.attempt")
    assert "ended without a log" in first.find_element(By.CSS_SELECTOR, ".attempt-phase").text  # killed: no log
    assert [s.get_attribute("data-mode") for s in first.find_elements(By.CSS_SELECTOR, "tr.step")] == ["live", "live"]
    assert second.find_element(By.CSS_SELECTOR, ".attempt-phase").text == "Succeeded"
    steps = [(s.get_attribute("data-kind"), s.get_attribute("data-mode")) for s in second.find_elements(By.CSS_SELECTOR, "tr.step")]
    assert steps == [("model", "replayed"), ("tool", "replayed"), ("model", "live")]
    replayed_tool = second.find_element(By.CSS_SELECTOR, "tr.step.replayed.tool")
    assert replayed_tool.find_element(By.CSS_SELECTOR, ".name").text == "get-weather"
    assert replayed_tool.find_element(By.CSS_SELECTOR, ".mode").text == "replayed"
    assert '{"city": "Paris"}' in replayed_tool.text  # the call with its arguments
    live_tools = browser.find_elements(By.CSS_SELECTOR, "tr.step.live.tool")
    assert len(live_tools) == 1  # run once, in the killed attempt
    saved = float(browser.find_element(By.CSS_SELECTOR, ".cost-saved").text.lstrip("$"))
    assert saved > 0 and "saved" in second.find_element(By.CSS_SELECTOR, "tr.step.replayed.model").text
    page = browser.page_source
    assert SECRET not in page
    assert "sunny" not in page  # message content (the tool's result, the answer) is off by default
    (tmp_path / "run.html").write_text(page)
    # Read only: viewing claimed no attempt and wrote nothing.
    assert {p: p.stat().st_mtime_ns for p in store.rglob("*") if p.is_file()} == before


def test_content_only_when_switched_on_and_never_a_secret(killed_and_resumed, browser, ui) -> None:
    for flags, env in ((("--show-content",), {}), ((), {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})):
        url = ui(*flags, env=env)
        browser.get(url + "runs/weather-openai")
        page = browser.page_source
        assert "sunny, 21 C" in page, flags  # the tool's result and the answer
        assert SECRET not in page
        browser.get(url)
        assert SECRET not in browser.page_source
    # Nowhere in the store either (what any viewer reads).
    for path in killed_and_resumed[0].rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_it_answers_only_requests_addressed_to_it(ui) -> None:
    """A page elsewhere that rebinds its own host name to 127.0.0.1 cannot read the runs."""
    port = int(ui().rstrip("/").rsplit(":", 1)[1])
    for host, expected in ((f"127.0.0.1:{port}", 200), (f"localhost:{port}", 200), (f"evil.example:{port}", 421)):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/", headers={"Host": host})
        rsp = conn.getresponse()
        body = rsp.read().decode()
        assert rsp.status == expected, host
        assert ("weather-openai" in body) == (expected == 200)
        conn.close()


FLAKY_LOOKUP = """
def lookup_order(order: str) -> str:
    raise ConnectionError(f"order database unreachable for {order}")
"""


def test_approvals_with_who_decided_and_errors_with_their_cause(browser, ui, tmp_path: Path) -> None:
    """The refund example: its lookup tool fails (the error is recorded and shown with its cause),
    the refund waits for a human; approved by a named approver, the next attempt refunds once."""
    from selenium.webdriver.common.by import By

    from tether.approvals import list_approvals

    for f in ("refund.yaml", "refund.script.yaml", "example_tools.py"):
        shutil.copy(EXAMPLES / f, tmp_path / f)
    (tmp_path / "flaky_tools.py").write_text(FLAKY_LOOKUP)
    docs = list(yaml.safe_load_all((tmp_path / "refund.yaml").read_text()))
    next(d for d in docs if d["metadata"]["name"] == "lookup-order")["spec"]["implementation"] = "flaky_tools:lookup_order"
    (tmp_path / "refund.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    store = tmp_path / "store"
    first = tether("run", str(tmp_path / "refund.yaml"), "--store", str(store))
    out = first.communicate(timeout=180)[0]
    assert first.returncode == 3, out  # suspended
    (request,) = list_approvals(open_store(str(store)), "refund-openai")
    approve = tether(
        "approve", "refund-openai", request["id"], "--yes", "--by", "dana@example.com", "--reason", "arrived damaged", "--store", str(store)
    )
    assert approve.wait(60) == 0
    second = tether("run", str(tmp_path / "refund.yaml"), "--store", str(store))
    out = second.communicate(timeout=180)[0]
    assert second.returncode == 0, out

    started = tether("ui", "--port", "0", "--store", str(store))
    try:
        assert started.stdout is not None
        url = re.search(r"http://127\.0\.0\.1:\d+/", started.stdout.readline()).group(0)  # type: ignore[union-attr]
        browser.get(url + "runs/refund-openai")
        browser.save_screenshot(str(tmp_path / "refund.png"))
        first_attempt, second_attempt = browser.find_elements(By.CSS_SELECTOR, "section.attempt")
        assert first_attempt.find_element(By.CSS_SELECTOR, ".attempt-phase").text == "AwaitingApproval"
        assert second_attempt.find_element(By.CSS_SELECTOR, ".attempt-phase").text == "Succeeded"
        failed = first_attempt.find_element(By.CSS_SELECTOR, "tr.step.tool.live")
        assert failed.find_element(By.CSS_SELECTOR, ".outcome").text == "error"
        assert "ConnectionError: order database unreachable for A1" in failed.find_element(By.CSS_SELECTOR, ".error").text
        (approval,) = browser.find_elements(By.CSS_SELECTOR, "tr.approval")
        assert approval.find_element(By.CSS_SELECTOR, ".decision").text == "approved"
        assert approval.find_element(By.CSS_SELECTOR, ".by").text == "dana@example.com"
        assert "arrived damaged" in approval.text and '"amount": 40' in approval.text
        refunds = [
            r
            for r in browser.find_elements(By.CSS_SELECTOR, "tr.step.tool")
            if r.find_element(By.CSS_SELECTOR, ".name").text == "issue-refund"
        ]
        assert [r.get_attribute("data-mode") for r in refunds] == ["live"]  # refunded once, after the decision
    finally:
        started.terminate()
        started.wait(10)


def test_the_first_divergence_is_shown(browser, ui, tmp_path: Path) -> None:
    """A run resumed from a changed input leaves the recorded path at its first turn: the page
    says where, and the tool call the new path asks for again is still served from the journal."""
    from selenium.webdriver.common.by import By

    for f in ("weather.yaml", "weather.script.yaml", "example_tools.py"):
        shutil.copy(EXAMPLES / f, tmp_path / f)
    store = tmp_path / "store"
    first = tether("run", str(tmp_path / "weather.yaml"), "--store", str(store))
    assert first.wait(180) == 0
    manifest = (tmp_path / "weather.yaml").read_text().replace("What is the weather in Paris today?", "Weather in Paris, please.")
    (tmp_path / "weather.yaml").write_text(manifest)
    second = tether("run", str(tmp_path / "weather.yaml"), "--store", str(store), "--allow-manifest-change")
    assert second.wait(180) == 0
    started = tether("ui", "--port", "0", "--store", str(store))
    try:
        assert started.stdout is not None
        url = re.search(r"http://127\.0\.0\.1:\d+/", started.stdout.readline()).group(0)  # type: ignore[union-attr]
        browser.get(url + "runs/weather-openai")
        _, resumed = browser.find_elements(By.CSS_SELECTOR, "section.attempt")
        assert "First divergence: step 1 (model)" in resumed.find_element(By.CSS_SELECTOR, ".divergence").text
        steps = [(s.get_attribute("data-kind"), s.get_attribute("data-mode")) for s in resumed.find_elements(By.CSS_SELECTOR, "tr.step")]
        assert steps == [("model", "live"), ("tool", "replayed"), ("model", "live")]
    finally:
        started.terminate()
        started.wait(10)
