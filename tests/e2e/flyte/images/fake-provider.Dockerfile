# The fake model provider for the Flyte e2e: the operator image (its environment holds
# tether-testing's dependencies) plus the tether.testing sources, in one small layer (the disk of
# the kind node is scarce). Context: a tar of testing/src/tether/testing and this file.
ARG BASE
FROM ${BASE}
COPY testing/src/tether/testing /opt/tether/lib/python3.11/site-packages/tether/testing/
RUN python -c "import tether.testing.fake_provider"
ENTRYPOINT []
