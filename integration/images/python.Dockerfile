# Python image for the mock providers and the test runner: the local stand-in for
# `python:3.11-slim` + the test requirements. Built by scripts/docker-images.sh
# (BASE_IMAGE = a debootstrapped Debian bookworm); with a registry it also builds
# from the default `debian:bookworm-slim`:
#   docker build -f integration/images/python.Dockerfile -t llm-failover/python:3 integration/images
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
# Extra CA certificates (a TLS-intercepting egress proxy); the directory may be empty.
COPY extra-ca/ /usr/local/share/ca-certificates/
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-venv ca-certificates >/dev/null \
 && update-ca-certificates >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Same pins as scripts/setup.sh (the script passes them in).
ARG PIP_PINS="pytest==9.2.0 pytest-timeout==2.4.0 requests==2.34.2"
RUN pip install -q --no-cache-dir ${PIP_PINS} && python -c "import pytest, pytest_timeout, requests"
CMD ["python3"]
