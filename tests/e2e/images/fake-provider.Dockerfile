# The fake model provider (tether.testing) for the e2e cluster: the operator image (its core
# environment holds tether-testing's dependencies) plus the tether-testing package.
# Context: py-images.sh's tar stream (the repository's packages and wheels/).
# Two stages: the wheels (its build backend among them, ~150 MB) are needed only to build
# tether-testing's wheel; a layer that copied them in would keep them even once deleted.
ARG BASE
FROM ${BASE} AS wheel
USER 0
COPY testing /src/testing
COPY envs/core.txt wheel[s] /tmp/wheels/
RUN set -e; if ls /tmp/wheels/*.whl >/dev/null 2>&1; then src="--no-index --find-links /tmp/wheels"; else src=""; fi; \
    /opt/tether/bin/python -m pip wheel -q --no-cache-dir --disable-pip-version-check --no-deps $src -w /out /src/testing

FROM ${BASE}
USER 0
COPY --from=wheel /out /tmp/testing-wheel
RUN /opt/tether/bin/python -m pip install -q --no-cache-dir --disable-pip-version-check --no-deps --no-index /tmp/testing-wheel/*.whl \
    && rm -rf /tmp/testing-wheel && python -c "import tether.testing.fake_provider"
USER 65532:65532
ENTRYPOINT []
