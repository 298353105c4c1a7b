"""The operator's run view (chart value ui.enabled) on the real apiserver, played by two users with
only the RBAC rights named: each sees the runs of the namespace where they may `get agentruns`,
and nothing of the other's.

A release of the chart with ui.enabled (`tether-ui`, local executor) serves ui-a and ui-b; its
operator runs as that release's ServiceAccount with the view on a port of its own, and runs the
weather example in each namespace against Tether's fake provider (the openai test environment's
interpreter). The viewers are static-token users of the test apiserver: `tether-test-user` may get
and list AgentRuns in ui-a only, `tether-test-user-2` may get the one run `weather` in ui-b only.
Checked: no token or a token the apiserver does not know sees nothing (401); each user's list
holds their namespace's run only; a run page of the other namespace is refused (403) and shows
nothing of it; a removed RoleBinding ends access within the review cache's seconds; the login
form keeps the token server-side (the cookie is a random session id); no page holds the runs' API
key or the operator's token; and the ClusterRole gains tokenreviews/subjectaccessreviews
`create` with ui.enabled only. (Pages in a browser, and a tool's Secret: tests/core/test_ui.py.)
"""

from __future__ import annotations

import http.cookiejar
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
import yaml

from tests.support.kube import ControlPlane, free_port

from .conftest import (
    REPO,
    Operator,
    Release,
    get,
    install_release,
    release_operator,
    uninstall_release,
    wait_for,
)
from .test_e2e_openai import _agent_python

pytestmark = pytest.mark.kube

NS_A, NS_B = "ui-a", "ui-b"
RELEASE = Release("tether-ui-system", "tether-ui", (NS_A, NS_B), "ui-other")
ALICE, BOB = "tether-test-user", "tether-test-user-2"
EXAMPLES = REPO / "examples" / "openai"
KEY = "fake-key-ui-view-0451"


@pytest.fixture(scope="module")
def release(kube: ControlPlane, tether_release: Release) -> Iterator[Release]:
    install_release(kube, RELEASE, "--set", "executor.kind=local", "--set", "ui.enabled=true",
                    "--set", "providers.allowedBaseURLs={http://127.0.0.1}")  # fmt: skip
    # The viewers' rights, and nothing else: get+list in ui-a for one, get on one run in ui-b for the other.
    kube.kubectl("create", "role", "run-reader", "-n", NS_A, "--verb=get,list", "--resource=agentruns.tether.dev", check=False)
    kube.kubectl("create", "rolebinding", "alice-reads", "-n", NS_A, "--role=run-reader", f"--user={ALICE}", check=False)
    kube.kubectl("create", "role", "weather-reader", "-n", NS_B, "--verb=get", "--resource=agentruns.tether.dev",
                 "--resource-name=weather", check=False)  # fmt: skip
    kube.kubectl("create", "rolebinding", "bob-reads", "-n", NS_B, "--role=weather-reader", f"--user={BOB}", check=False)
    yield RELEASE
    uninstall_release(kube, RELEASE)


@pytest.fixture(scope="module")
def ui_operator(kube: ControlPlane, release: Release, tmp_path_factory) -> Iterator[Operator]:
    from tether.testing.fake_provider import FakeProvider

    script = yaml.safe_load((EXAMPLES / "weather.script.yaml").read_text())
    with FakeProvider(script, latency=0.05) as fake:
        op = release_operator(
            kube,
            release,
            tmp_path_factory.mktemp("ui-operator"),
            TETHER_EXEC_PYTHON=_agent_python(),
            PYTHONPATH=str(EXAMPLES),
            TETHER_TOOL_MODULES="example_tools",
            OPENAI_AGENTS_DISABLE_TRACING="1",
            TETHER_EXECUTOR="local",
            TETHER_UI_PORT=str(free_port()),
        )
        try:
            for ns in release.served:
                kube.kubectl("create", "secret", "generic", "openai", "-n", ns, f"--from-literal=api-key={KEY}", check=False)
                kube.kubectl("label", "secret", "openai", "-n", ns, "tether.dev/usable=true", "--overwrite")
                docs = list(yaml.safe_load_all((EXAMPLES / "weather.yaml").read_text()))
                run = next(d for d in docs if d["kind"] == "AgentRun")
                run["metadata"]["name"] = "weather"
                run["spec"]["model"]["baseURL"] = fake.base_url("openai")
                kube.kubectl("apply", "-n", ns, "-f", "-", input="\n---\n".join(json.dumps(d) for d in docs))
            for ns in release.served:
                wait_for(
                    lambda ns=ns: get(kube, "agentrun", ns, "weather").get("status", {}).get("phase") == "Succeeded", 180, what=f"{ns} run"
                )
            yield op
        finally:
            op.stop()


def fetch(op: Operator, path: str, token: str | None = None, opener: urllib.request.OpenerDirector | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{op.env['TETHER_UI_PORT']}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with (opener or urllib.request.build_opener()).open(request, timeout=30) as rsp:
            return rsp.status, rsp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def uid(kube: ControlPlane, ns: str) -> str:
    return str(get(kube, "agentrun", ns, "weather")["metadata"]["uid"])


def test_without_a_known_token_nothing_is_shown(kube: ControlPlane, ui_operator: Operator) -> None:
    for token in (None, "not-a-token-the-apiserver-knows"):
        for path in ("/", f"/runs/{NS_A}/weather", f"/runs/{NS_B}/weather"):
            status, body = fetch(ui_operator, path, token)
            assert status == 401, (path, status)
            assert "weather" not in body and uid(kube, NS_A) not in body and uid(kube, NS_B) not in body
            assert 'name="token"' in body and 'action="/login"' in body  # the sign-in form, from any page


def test_each_viewer_sees_only_the_runs_they_may_get(kube: ControlPlane, ui_operator: Operator) -> None:
    alice, bob = kube.tokens[ALICE], kube.tokens[BOB]
    status, page = fetch(ui_operator, "/", alice)
    assert status == 200 and ALICE in page
    assert f'href="/runs/{NS_A}/weather"' in page and f"runs/{NS_B}/" not in page
    assert "namespaces shown: ui-a" in page
    status, page = fetch(ui_operator, f"/runs/{NS_A}/weather", alice)
    assert status == 200 and 'class="attempts">1<' in page and 'data-mode="live"' in page and "Succeeded" in page
    assert "{&quot;city&quot;: &quot;Paris&quot;}" in page  # the tool call with its arguments
    status, page = fetch(ui_operator, f"/runs/{NS_B}/weather", alice)
    assert status == 403 and "Paris" not in page and uid(kube, NS_B) not in page
    # Bob may get the one run in ui-b, not list the namespace: his list is empty, its page is his.
    status, page = fetch(ui_operator, "/", bob)
    assert status == 200 and "runs/" not in page and "namespaces shown: none" in page
    status, page = fetch(ui_operator, f"/runs/{NS_B}/weather", bob)
    assert status == 200 and 'class="attempts">1<' in page
    status, page = fetch(ui_operator, f"/runs/{NS_A}/weather", bob)
    assert status == 403 and "Paris" not in page
    # The operator's pages never carry the provider key the runs used.
    for token in (alice, bob):
        for path in ("/", f"/runs/{NS_A}/weather", f"/runs/{NS_B}/weather"):
            assert KEY not in fetch(ui_operator, path, token)[1]


def test_a_removed_rolebinding_ends_access(kube: ControlPlane, ui_operator: Operator) -> None:
    """Reviews are cached for seconds, not kept: taking the right away takes the page away."""
    kube.kubectl("create", "rolebinding", "carol-reads", "-n", NS_A, "--role=run-reader", "--user=tether-test-user-3")
    carol = kube.tokens["tether-test-user-3"]
    assert fetch(ui_operator, f"/runs/{NS_A}/weather", carol)[0] == 200
    kube.kubectl("delete", "rolebinding", "carol-reads", "-n", NS_A)
    wait_for(lambda: fetch(ui_operator, f"/runs/{NS_A}/weather", carol)[0] == 403, 60, 1.0, what="access ends")


def test_sign_in_keeps_the_token_in_the_operator(kube: ControlPlane, ui_operator: Operator) -> None:
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    base = f"http://127.0.0.1:{ui_operator.env['TETHER_UI_PORT']}"
    form = urllib.parse.urlencode({"token": kube.tokens[ALICE]}).encode()
    with opener.open(urllib.request.Request(f"{base}/login", data=form), timeout=30) as rsp:
        assert rsp.status == 200 and f'href="/runs/{NS_A}/weather"' in rsp.read().decode()  # redirected to the list
    (cookie,) = list(jar)
    assert cookie.name == "tether_ui_session" and kube.tokens[ALICE] not in cookie.value and len(cookie.value) >= 40
    assert cookie.has_nonstandard_attr("HttpOnly") and re.fullmatch(r"strict", str(cookie.get_nonstandard_attr("SameSite")), re.I)
    assert fetch(ui_operator, f"/runs/{NS_B}/weather", opener=opener)[0] == 403
    # A sign-in posted from another site is refused.
    cross = urllib.request.Request(f"{base}/login", data=form, headers={"Origin": "http://evil.example"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(cross, timeout=30)
    assert refused.value.code == 403
    with opener.open(f"{base}/logout", timeout=30):
        pass
    assert fetch(ui_operator, "/", opener=opener)[0] == 401


def _can(kube: ControlPlane, subject: str, verb: str, resource: str) -> bool:
    return kube.kubectl("auth", "can-i", verb, resource, f"--as={subject}", check=False).stdout.strip() == "yes"


def test_only_a_release_with_the_view_may_review_tokens_and_access(kube: ControlPlane, release: Release, tether_release: Release) -> None:
    for resource in ("tokenreviews.authentication.k8s.io", "subjectaccessreviews.authorization.k8s.io"):
        assert _can(kube, release.subject, "create", resource)
        assert not _can(kube, tether_release.subject, "create", resource)  # the session release: ui off
        assert not _can(kube, release.subject, "list", resource)


def test_no_secret_on_any_page(kube: ControlPlane, ui_operator: Operator) -> None:
    """Every page a viewer reaches, signed in or not, holds neither the runs' API key nor the
    operator's own token."""
    own = json.loads((ui_operator.workdir / "kubeconfig").read_text())["users"][0]["user"]["token"]
    for token in (None, kube.tokens[ALICE], kube.tokens[BOB]):
        for path in ("/", "/login", f"/runs/{NS_A}/weather", f"/runs/{NS_B}/weather"):
            body = fetch(ui_operator, path, token)[1]
            assert KEY not in body and own not in body
    assert KEY not in ui_operator.logs() and kube.tokens[ALICE] not in ui_operator.logs()
