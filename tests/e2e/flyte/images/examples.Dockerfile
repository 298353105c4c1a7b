# The runtime image of the Flyte e2e's task pods: the e2e openai examples image with this
# checkout's runtime package over the installed one (one small layer), so the task pods run the
# code under test. Context: a tar of runtime/src/tether and this file.
ARG BASE
FROM ${BASE}
COPY runtime/src/tether /opt/tether/lib/python3.11/site-packages/tether/
RUN python -c "import tether.entrypoint"
