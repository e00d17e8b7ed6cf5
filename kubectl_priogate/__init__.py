"""`kubectl priogate`: a kubectl plugin that shows what priogate holds and decides.

kubectl runs any executable named `kubectl-<name>` on PATH as `kubectl <name>` and hands it every
argument, global flags included ("Extend kubectl with plugins",
https://kubernetes.io/docs/tasks/extend-kubectl/kubectl-plugins/), so this package parses
--kubeconfig, --context and --namespace itself. `pip install .` puts the executable on PATH
(`[project.scripts]` in pyproject.toml).

Layout: `main` (flags, errors, exit codes), `source` (every API read, at the edge), and pure
functions over plain objects: `reservations`, `simulation`, `why` (what each subcommand
computes) and `output` (tables, JSON, YAML).
"""
