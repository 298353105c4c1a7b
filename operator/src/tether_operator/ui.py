"""The run view served by the operator (chart value ``ui.enabled``): the pages of ``tether ui``
(``tether.runview``) for the AgentRuns the viewer may ``get``, reached by ``kubectl port-forward``.

A port-forward carries no identity, so the viewer presents one: a Kubernetes bearer token (their
own: ``kubectl create token``, an OIDC id-token, whatever their kubeconfig holds), in an
``Authorization: Bearer`` header or once through the login form. The operator asks the apiserver
who it is (TokenReview) and, for every namespace and run it would show, whether that user may
``get agentruns`` there (SubjectAccessReview, with the user's groups and extra): a namespace's runs
are listed only if the user may get AgentRuns in the whole namespace; a run's page needs ``get`` on
that run. The operator's own rights read the runs and the store, only after that answer.

The login form keeps the token in the operator's memory and hands the browser a random session
id (an HttpOnly, SameSite=Strict cookie): the token never sits in the browser, where every server
on ``localhost`` would receive a cookie holding it. Reviews are cached briefly (``REVIEW_SECONDS``)
so a revoked token or a removed RoleBinding takes effect within that; sessions end after
``SESSION_SECONDS``. It listens on 127.0.0.1 inside the pod by default: reachable by a
port-forward (which needs ``create pods/portforward`` in the operator's namespace), not from other
pods. Read only: GET pages, and the login form.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from aiohttp import web

from tether.api import GROUP
from tether.runview import HEADERS, RunRow, page, read_run, run_body, runs_table
from tether.stores import Store

from . import kube

REVIEW_SECONDS = 30.0
SESSION_SECONDS = 8 * 3600.0
COOKIE = "tether_ui_session"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Viewer:
    username: str
    uid: str
    groups: tuple[str, ...]
    extra: dict[str, list[str]]


class Reviews:
    """TokenReview and SubjectAccessReview answers, cached for ``REVIEW_SECONDS``."""

    def __init__(self) -> None:
        self._tokens: dict[str, tuple[float, Viewer | None]] = {}
        self._access: dict[tuple[str, str, str], tuple[float, bool]] = {}

    async def viewer(self, token: str) -> Viewer | None:
        digest = hashlib.sha256(token.encode()).hexdigest()
        hit = self._tokens.get(digest)
        if hit is not None and time.monotonic() - hit[0] < REVIEW_SECONDS:
            return hit[1]
        status = await kube.token_review(token)
        user = status.get("user") or {}
        viewer = (
            Viewer(str(user.get("username")), str(user.get("uid") or ""), tuple(user.get("groups") or ()), dict(user.get("extra") or {}))
            if status.get("authenticated") and user.get("username")
            else None
        )
        if len(self._tokens) > 4096:  # bounded: tokens tried at random must not grow it without end
            self._tokens.clear()
        self._tokens[digest] = (time.monotonic(), viewer)
        return viewer

    async def may_get(self, viewer: Viewer, namespace: str, name: str = "") -> bool:
        """Whether the viewer may ``get agentruns`` in ``namespace`` (all of them, or ``name``)."""
        key = (hashlib.sha256(repr(viewer).encode()).hexdigest(), namespace, name)
        hit = self._access.get(key)
        if hit is not None and time.monotonic() - hit[0] < REVIEW_SECONDS:
            return hit[1]
        attributes = {"namespace": namespace, "verb": "get", "group": GROUP, "resource": "agentruns"}
        if name:
            attributes["name"] = name
        spec: dict[str, Any] = {"user": viewer.username, "groups": list(viewer.groups), "resourceAttributes": attributes}
        if viewer.uid:
            spec["uid"] = viewer.uid
        if viewer.extra:
            spec["extra"] = viewer.extra
        allowed = await kube.access_review(spec)
        if len(self._access) > 4096:
            self._access.clear()
        self._access[key] = (time.monotonic(), allowed)
        return allowed


LOGIN = (
    "<h1>Tether runs</h1><p>Sign in with a Kubernetes bearer token (e.g. <code>kubectl create token NAME</code>, or the "
    "token of your kubeconfig): you will see the AgentRuns you may <code>get</code>.</p>"
    '<form method="post" action="/login"><input type="password" name="token" size="60" autocomplete="off" required> '
    '<button type="submit">Sign in</button></form>'
)


def app(namespaces: Callable[[], list[str]], store_for: Callable[[str], Store], *, content: bool) -> web.Application:
    """``namespaces``: where the operator serves runs (None-like empty: every namespace);
    ``store_for``: each namespace's store."""
    reviews = Reviews()
    sessions: dict[str, tuple[float, str]] = {}  # session id -> (expiry, token)

    def token_of(request: web.Request) -> str:
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
        sid = request.cookies.get(COOKIE, "")
        held = sessions.get(sid)
        if held is None or held[0] < time.time():
            sessions.pop(sid, None)
            return ""
        return held[1]

    def html_response(body: str, status: int = 200, title: str = "Tether runs") -> web.Response:
        return web.Response(status=status, text=page(title, body), content_type="text/html")

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        response: web.StreamResponse
        if request.path in ("/login", "/logout"):
            response = await handler(request)
        else:
            token = token_of(request)
            viewer = await reviews.viewer(token) if token else None
            if viewer is None:
                response = html_response(LOGIN if not token else '<p class="error">That token was not accepted.</p>' + LOGIN, 401)
                response.headers["WWW-Authenticate"] = 'Bearer realm="tether"'
            else:
                request["viewer"] = viewer
                response = await handler(request)
        response.headers.update(HEADERS)
        return response

    async def login_form(_: web.Request) -> web.Response:
        return html_response(LOGIN)

    async def login(request: web.Request) -> web.Response:
        origin = request.headers.get("Origin")
        if origin and origin.partition("://")[2] != request.host:
            return html_response("<p>Cross-site sign-in refused.</p>", 403)
        token = str((await request.post()).get("token") or "").strip()
        if not token or await reviews.viewer(token) is None:
            return html_response('<p class="error">That token was not accepted.</p>' + LOGIN, 401)
        now = time.time()
        for sid in [s for s, (expiry, _) in sessions.items() if expiry < now]:
            del sessions[sid]
        sid = secrets.token_urlsafe(32)
        sessions[sid] = (now + SESSION_SECONDS, token)
        response = web.HTTPSeeOther("/")
        response.set_cookie(COOKIE, sid, httponly=True, samesite="Strict", path="/", max_age=int(SESSION_SECONDS))
        raise response

    async def logout(request: web.Request) -> web.Response:
        sessions.pop(request.cookies.get(COOKIE, ""), None)
        response = web.HTTPSeeOther("/login")
        response.del_cookie(COOKIE, path="/")
        raise response

    async def runs(request: web.Request) -> web.Response:
        viewer: Viewer = request["viewer"]
        served = namespaces()
        items = [run for ns in served or [""] for run in await kube.list_runs(ns)]
        allowed: dict[str, bool] = {}
        rows = []
        for obj in sorted(items, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"])):
            ns = obj["metadata"]["namespace"]
            if ns not in allowed:
                allowed[ns] = await reviews.may_get(viewer, ns)
            if allowed[ns]:
                rows.append(_row(obj))
        shown = sorted(ns for ns, ok in allowed.items() if ok)
        body = (
            f'<h1>Tether runs</h1><p class="note">signed in as <span class="viewer">{html.escape(viewer.username)}</span> '
            f'(<a href="/logout">sign out</a>); namespaces shown: {html.escape(", ".join(shown) or "none")}</p>{runs_table(rows)}'
        )
        return html_response(body)

    async def one(request: web.Request) -> web.Response:
        viewer: Viewer = request["viewer"]
        ns, name = request.match_info["namespace"], request.match_info["name"]
        served = namespaces()
        if not await reviews.may_get(viewer, ns, name):
            return html_response(
                f"<p>{html.escape(viewer.username)} may not get agentruns/{html.escape(name)} in {html.escape(ns)}.</p>", 403
            )
        obj = await kube.get_run(ns, name) if not served or ns in served else None
        if obj is None:
            return html_response(f"<p>No AgentRun {html.escape(ns)}/{html.escape(name)} served here.</p>", 404)
        uid, framework = obj["metadata"]["uid"], str((obj.get("spec") or {}).get("framework") or "")
        view = await asyncio.to_thread(read_run, store_for(ns), uid, framework=framework, content=content)
        if view is None:
            return html_response(f"<p>AgentRun {html.escape(ns)}/{html.escape(name)} has not started yet.</p>", 404)
        return html_response('<p><a href="/">all runs</a></p>' + run_body(view, title=f"{ns}/{name}"), title=f"Run {ns}/{name}")

    application = web.Application(middlewares=[guard])
    application.router.add_get("/", runs)
    application.router.add_get("/login", login_form)
    application.router.add_post("/login", login)
    application.router.add_get("/logout", logout)
    application.router.add_get("/runs/{namespace}/{name}", one)
    return application


def _row(obj: dict[str, Any]) -> RunRow:
    """A runs-list line from the AgentRun's status (what the operator mirrored from progress)."""
    meta, status = obj["metadata"], obj.get("status") or {}
    progress = {
        "phase": status.get("phase"),
        "attempt": status.get("attempts") or 0,
        "steps": status.get("steps") or {},
        "usage": status.get("usage") or {},
        "updatedAt": status.get("completionTime") or status.get("startTime"),
    }
    link = f"/runs/{quote(meta['namespace'])}/{quote(meta['name'])}"
    framework = str((obj.get("spec") or {}).get("framework") or "")
    return RunRow(meta["uid"], link, progress, framework, meta["namespace"], meta["name"])


async def serve(
    host: str, port: int, namespaces: Callable[[], list[str]], store_for: Callable[[str], Store], *, content: bool
) -> web.AppRunner:
    """Start the view; the caller keeps the runner and cleans it up on shutdown."""
    runner = web.AppRunner(app(namespaces, store_for, content=content), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
