# An S3 server for the e2e cluster: moto's server, at the versions the core environment pins.
# Context: the repository root (with wheels/ of envs/core.txt: no network in the build).
ARG BASE
FROM ${BASE} AS build
COPY envs/core.txt wheel[s] /tmp/wheels/
RUN set -e; if ls /tmp/wheels/*.whl >/dev/null 2>&1; then src="--no-index --find-links /tmp/wheels"; else src=""; fi; \
    grep -v '^-e ' /tmp/wheels/core.txt > /tmp/constraints.txt; \
    python3 -m venv /opt/moto && /opt/moto/bin/pip install -q --no-cache-dir --disable-pip-version-check $src \
      -c /tmp/constraints.txt "moto[server]" boto3
FROM ${BASE}
COPY --from=build /opt/moto /opt/moto
USER 65532:65532
EXPOSE 5000
ENTRYPOINT ["/opt/moto/bin/moto_server", "-H", "0.0.0.0", "-p", "5000"]
