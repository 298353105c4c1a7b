# An S3 server for the e2e cluster: moto's server from the operator image (its core environment
# pins moto[server], the version the test suite runs against).
ARG BASE
FROM ${BASE}
EXPOSE 5000
ENTRYPOINT ["moto_server", "-H", "0.0.0.0", "-p", "5000"]
