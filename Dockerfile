# priogate webhook image: docker build -t priogate:0.1.0 .
#
# The base is pinned by digest so a rebuild gets the same image. The digest is the one public
# Dockerfiles pin for python:3.11-slim (a multi-arch index); it was not checked against the
# registry from here: refresh it with `docker buildx imagetools inspect python:3.11-slim`.
# https://docs.docker.com/reference/dockerfile/#from
ARG BASE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

# Build stage: gunicorn_h1c is a C extension published only as an sdist, so it needs a compiler,
# which the runtime image should not carry. Everything is installed into a virtualenv that the
# runtime stage copies as a whole.
FROM ${BASE} AS build
# The compiler comes from the base image's Debian release; its exact version follows the digest.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY requirements-image-build.txt requirements-image.txt ./
# Every file is checked against its pinned sha256 (make image-lock). --no-build-isolation builds
# the sdist with the hash-checked tools just installed instead of fetching unchecked ones.
# https://pip.pypa.io/en/stable/topics/secure-installs/
RUN pip install --no-cache-dir --require-hashes -r requirements-image-build.txt \
 && pip install --no-cache-dir --require-hashes --no-build-isolation -r requirements-image.txt

FROM ${BASE}
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
