# The open-source Flyte 2 backend: the static `flyte` binary scripts/flyte-backend.sh builds
# (CGO off), on the e2e Python base (a debootstrap rootfs with CA certificates).
ARG BASE
FROM ${BASE}
COPY flyte /usr/local/bin/flyte
USER 65532
ENTRYPOINT ["/usr/local/bin/flyte"]
