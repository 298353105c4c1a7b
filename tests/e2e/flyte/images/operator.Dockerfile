# The operator of this checkout for the Flyte e2e: the e2e operator image (its environment) with
# this checkout's runtime and operator packages over the installed ones, one small layer (the
# full image build is run.sh build's, minutes). Context: a tar of runtime/src/tether,
# operator/src/tether_operator and this file.
ARG BASE
FROM ${BASE}
COPY runtime/src/tether /opt/tether/lib/python3.11/site-packages/tether/
COPY operator/src/tether_operator /opt/tether/lib/python3.11/site-packages/tether_operator/
RUN python -c "import tether_operator"
