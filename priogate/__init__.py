"""priogate's core. `__version__` is the one place the version lives: pyproject.toml reads it
(setuptools' dynamic version), every program's --version and the priogate_build_info metric
report it, and hack/chart.py checks charts/priogate/Chart.yaml's appVersion and the image tag of
manifests/kustomization.yaml against it."""

__version__ = "0.1.0"
