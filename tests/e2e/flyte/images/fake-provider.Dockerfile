# The fake model provider for the Flyte e2e: the operator image (its environment holds
# tether-testing's dependencies) plus the tether.testing sources, in one small layer (the disk of
# the kind node is scarce). Context: testing/src/tether/testing.
ARG BASE
FROM ${BASE}
COPY . /opt/tether/lib/python3.11/site-packages/tether/testing/
RUN python -c "import tether.testing.fake_provider"
ENTRYPOINT []
