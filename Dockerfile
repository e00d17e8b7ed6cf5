# priogate webhook image: docker build -t priogate:0.1.0 .
#
# The base is pinned by digest so a rebuild gets the same image. The digest is the one public
# Dockerfiles pin for python:3.11-slim (a multi-arch index); it was not checked against the
# registry from here: refresh it with `docker buildx imagetools inspect python:3.11-slim`.
# https://docs.docker.com/reference/dockerfile/#from
ARG BASE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

FROM ${BASE}
WORKDIR /app
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
COPY requirements-image.txt /tmp/
# Every file is checked against its pinned sha256 (make image-lock), and every pin is a wheel, so
# nothing is compiled and the image needs no compiler.
# https://pip.pypa.io/en/stable/topics/secure-installs/
RUN python -m venv /opt/venv \
 && pip install --no-cache-dir --require-hashes --only-binary=:all: -r /tmp/requirements-image.txt \
 && rm /tmp/requirements-image.txt
COPY priogate/ priogate/
COPY webhook/ webhook/
COPY controller/ controller/
COPY certs/ certs/
USER 65532
ENTRYPOINT []
CMD ["python", "-m", "webhook"]
