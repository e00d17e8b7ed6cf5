# priogate webhook image: docker build -t priogate:0.1.0 .  (here: make image, hack/image/build.sh)
#
# The base is pinned by digest so a rebuild gets the same image. The digest is the one public
# Dockerfiles pin for python:3.11-slim (a multi-arch index); it was not checked against the
# registry from here: refresh it with `docker buildx imagetools inspect python:3.11-slim`.
# https://docs.docker.com/reference/dockerfile/#from
# Where that base cannot be pulled, make image builds an equivalent from Debian bookworm's own
# packages (hack/image/base.sh: Python 3.11 at /usr/bin) and passes it as BASE.
ARG BASE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

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
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
COPY requirements-image.txt /tmp/
# On a base whose Python is Debian's own (/usr/bin/python3, the bookworm base above) the venv
# module is a package of its own; python:3.11-slim carries it.
# hadolint ignore=DL3008
RUN if ! python -c "import ensurepip" 2>/dev/null; then \
      apt-get update \
      && apt-get install -y --no-install-recommends python3-venv \
      && rm -rf /var/lib/apt/lists/*; \
    fi
# Every file is checked against its pinned sha256 (make image-lock), and every pin is a wheel, so
# nothing is compiled and the image needs no compiler.
# https://pip.pypa.io/en/stable/topics/secure-installs/
# A build behind a TLS-inspecting proxy passes its CA bundle as the build secret pipcert
# (make image does); it is mounted for this step only and never lands in a layer.
# https://docs.docker.com/build/building/secrets/
RUN --mount=type=secret,id=pipcert \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi \
 && python -m venv /opt/venv \
 && pip install --no-cache-dir --require-hashes --only-binary=:all: -r /tmp/requirements-image.txt \
 && rm /tmp/requirements-image.txt
COPY priogate/ priogate/
COPY webhook/ webhook/
COPY controller/ controller/
COPY certs/ certs/
USER 65532
ENTRYPOINT []
CMD ["python", "-m", "webhook"]
