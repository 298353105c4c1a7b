"""The Flyte executor's per-namespace scoping, without a backend: each namespace is its own Flyte
project, a Secret reference names one Flyte secret of that project (Secret and key both in the
name: the backend ignores the group), the store credentials and the service account are the
namespace's. Against the real backend (the pod webhook injecting the values): tests/flyte."""

from __future__ import annotations

import itertools
import uuid

import kopf
import pytest

from tether.api import AgentRunSpec
from tether.contract import ExecRequest
from tether_operator.executors.base import SecretFile, Submission, execution_name
from tether_operator.executors.flyte import FlyteExecutor, check_template, flyte_secret_name
from tether_operator.handlers import make_executor
from tether_operator.settings import Settings


def submission(namespace: str, *files: SecretFile) -> Submission:
    uid = str(uuid.uuid4())
    spec = AgentRunSpec.model_validate({"framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hi"})
    sub = Submission(name=execution_name(uid), request=ExecRequest(run_id=uid, namespace=namespace, name="r", spec=spec))
    sub.secret_files = list(files)
    return sub


def executor(**kw: object) -> FlyteExecutor:
    return FlyteExecutor(endpoint="127.0.0.1:9", runtime_image="img", **kw)  # type: ignore[arg-type]


def test_a_flyte_secret_name_stands_for_one_secret_and_key() -> None:
    assert flyte_secret_name("openai", "apiKey") == "openai__apiKey"
    assert flyte_secret_name("tether-store", "AWS_ACCESS_KEY_ID") == "tether-store__AWS_ACCESS_KEY_ID"
    # Today's request was `group=<Secret>, key=<key>`, and the backend finds a secret by its key
    # alone: Secrets `db` and `billing` with a key `password` were one Flyte secret. Not any more,
    # and no two (Secret, key) pairs share a name.
    names = ["db", "billing", "a.b", "a-b", "a", "b.c", "x.y.z"]
    keys = ["password", "_x", "x_", "a__b", "b", "c", "b_c", "-"]
    pairs = list(itertools.product(names, keys))
    encoded = {flyte_secret_name(n, k) for n, k in pairs}
    assert len(encoded) == len(pairs)
    for n, k in pairs:  # and each name decodes back: the first `__` ends the Secret's name
        head, _, tail = flyte_secret_name(n, k).partition("__")
        assert (head.replace("_", "."), tail) == (n, k)


def test_a_key_flyte_cannot_name_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match=r"key 'tls.crt' of Secret 'web' cannot name a Flyte secret"):
        flyte_secret_name("web", "tls.crt")


def test_the_project_is_per_namespace_or_refused() -> None:
    for shared in ("tether", "tether-{ns}", ""):
        with pytest.raises(ValueError, match=r"must contain \{namespace\}"):
            check_template(shared, "the Flyte project")
    with pytest.raises(ValueError, match=r"only \{namespace\} may be filled in"):
        check_template("{team}-{namespace}", "the Flyte project")
    ex = executor()
    assert (ex.project_for("team-a"), ex.project_for("team-b")) == ("tether-team-a", "tether-team-b")
    assert executor(project="{namespace}").project_for("team-a") == "team-a"
    with pytest.raises(ValueError, match=r"Flyte project 'tether-a{58}' of namespace 'a{58}' is not a valid name"):
        ex.project_for("a" * 58)  # 65 characters: not a pod label value
    with pytest.raises(ValueError, match=r"the Flyte service account 'sa-\{team\}': only \{namespace\} may be filled in"):
        executor(service_account="sa-{team}")


def test_the_operator_refuses_a_shared_project_at_start() -> None:
    env = {"TETHER_EXECUTOR": "flyte", "TETHER_FLYTE_ENDPOINT": "flyte:8090", "TETHER_FLYTE_PROJECT": "tether"}
    with pytest.raises(kopf.PermanentError, match=r"TETHER_FLYTE_PROJECT .*must contain \{namespace\}"):
        make_executor(Settings.from_env(env))
    env.pop("TETHER_FLYTE_PROJECT")
    ex = make_executor(Settings.from_env(env | {"TETHER_RUNNER_STORE_SECRET": "team-store"}))
    assert isinstance(ex, FlyteExecutor)
    assert (ex.project, ex.store_secret) == ("tether-{namespace}", "team-store")


def test_each_namespaces_run_asks_for_its_own_secrets_store_credentials_and_service_account() -> None:
    ex = executor(store_secret="tether-store", service_account="runner-{namespace}")
    for ns in ("team-a", "team-b"):
        out = ex.overrides(submission(ns, SecretFile("db", "password", "model/apiKey")))
        # The names are the same in every namespace; the run is launched in the namespace's
        # project, whose secrets the backend injects (tests/flyte proves the values).
        assert [(s.key, s.group, s.as_env_var) for s in out["secrets"]] == [
            ("db__password", None, "TETHER_SECRET_0"),
            ("tether-store__AWS_ACCESS_KEY_ID", None, "AWS_ACCESS_KEY_ID"),
            ("tether-store__AWS_SECRET_ACCESS_KEY", None, "AWS_SECRET_ACCESS_KEY"),
        ]
        assert out["service_account"] == f"runner-{ns}"
    # Without a runner store Secret (the pods' identity reaches the store), none is asked for.
    assert "secrets" not in executor().overrides(submission("team-a"))
    assert "service_account" not in executor().overrides(submission("team-a"))


def test_a_namespace_whose_project_cannot_be_named_fails_its_run_naming_it() -> None:
    import asyncio

    from tether_operator.executors.base import ExecutionState

    ex = executor()
    sub = submission("n" * 60)
    status = asyncio.run(ex.submit(sub))
    assert status.state is ExecutionState.FAILED
    assert f"Flyte project 'tether-{'n' * 60}' of namespace '{'n' * 60}' is not a valid name" in status.message
    asyncio.run(ex.abort(sub.name, sub.request.namespace))  # deleting it never hangs on the backend
