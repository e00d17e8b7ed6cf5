# priogate webhook image: docker build -t priogate:0.1.0 .  (here: make image, hack/image/build.sh)
#
# The base is pinned by digest so a rebuild gets the same image. The digest is the one public
# Dockerfiles pin for python:3.11-slim (a multi-arch index); it was not checked against the
# registry from here: refresh it with `docker buildx imagetools inspect python:3.11-slim`.
# https://docs.docker.com/reference/dockerfile/#from
# Where that base cannot be pulled, make image builds an equivalent from Debian bookworm's own
# packages (hack/image/base.sh: Python 3.11 at /usr/bin) and passes it as BASE.
ARG BASE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

# Build stage: gunicorn_h1c is a C extension published only as an sdist, so it needs a compiler,
# which the runtime image should not carry. Everything is installed into a virtualenv that the
# runtime stage copies as a whole.
FROM ${BASE} AS build
# The compiler comes from the base image's Debian release; its exact version follows the digest.
# On a base whose Python is Debian's own (/usr/bin/python3, the bookworm base above) the headers
# and the venv module are separate packages; python:3.11-slim carries both under /usr/local.
# $pkgs is a word list on purpose (SC2086).
# hadolint ignore=DL3008,SC2086
RUN pkgs="gcc libc6-dev" \
 && if [ "$(command -v python3)" = /usr/bin/python3 ]; then pkgs="$pkgs python3-dev python3-venv"; fi \
 && apt-get update \
 && apt-get install -y --no-install-recommends $pkgs \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY requirements-image-build.txt requirements-image.txt ./
# Every file is checked against its pinned sha256 (make image-lock). --no-build-isolation builds
# the sdist with the hash-checked tools just installed instead of fetching unchecked ones.
# https://pip.pypa.io/en/stable/topics/secure-installs/
# A build behind a TLS-inspecting proxy passes its CA bundle as the build secret pipcert
# (make image does); it is mounted for this step only and never lands in a layer.
# https://docs.docker.com/build/building/secrets/
RUN --mount=type=secret,id=pipcert \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi \
 && pip install --no-cache-dir --require-hashes -r requirements-image-build.txt \
 && pip install --no-cache-dir --require-hashes --no-build-isolation -r requirements-image.txt

FROM ${BASE}
# OCI annotations (https://github.com/opencontainers/image-spec/blob/main/annotations.md); make image
# fills in the version, the source and the commit.
ARG VERSION=0.1.0
ARG SOURCE=""
ARG REVISION=""
LABEL org.opencontainers.image.title="priogate" \
      org.opencontainers.image.description="PriorityClass admission webhook, PodGroup quota gatekeeper and gang-preemption controller" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
WORKDIR /app
COPY --from=build /opt/venv /opt/venv
COPY priogate/ priogate/
COPY webhook/ webhook/
COPY controller/ controller/
COPY certs/ certs/
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 65532
ENTRYPOINT []
CMD ["python", "-m", "webhook"]
