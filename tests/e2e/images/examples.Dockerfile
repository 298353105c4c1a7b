# A framework's runtime image plus the examples' tool module (examples/<framework>/example_tools.py),
# as a user builds their own agent image FROM the runtime image. Context: examples/<framework>.
ARG BASE
FROM ${BASE}
COPY example_tools.py /opt/tether/lib/python3.11/site-packages/example_tools.py
