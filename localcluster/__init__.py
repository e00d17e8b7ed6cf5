"""The real local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
kwok with fake nodes) with the priogate webhook registered in it. `python -m localcluster`."""

from localcluster.cluster import LocalCluster, Options
from localcluster.components import ApiServerMode

__all__ = ["ApiServerMode", "LocalCluster", "Options"]
