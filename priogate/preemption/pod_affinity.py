"""Required inter-pod affinity, anti-affinity and host ports of a pod: what kube-scheduler's
InterPodAffinity and NodePorts filters read, parsed slim and matched as they match.

- A term (k8s.io/api core/v1 PodAffinityTerm) matches a pod when its labelSelector matches
  the pod's labels (a missing selector matches nothing, an empty one everything:
  metav1.LabelSelectorAsSelector) and the pod's namespace is one the term names: its
  `namespaces`, or, with neither `namespaces` nor a `namespaceSelector`, the namespace of the
  pod that carries the term; an empty `namespaceSelector` ({}) means every namespace. A
  non-empty `namespaceSelector` needs the Namespace objects' labels, which the engine does not
  have: matching such a term answers None ("cannot tell"). matchLabelKeys and
  mismatchLabelKeys need nothing here: kube-apiserver merges them into labelSelector when the
  pod is created (KEP-3633).
- Host ports (pkg/scheduler/util GetHostPorts): every container's, and restartable init
  containers', ports with hostPort > 0; protocol TCP and hostIP 0.0.0.0 when not set. Two
  ports conflict (HostPortInfo.CheckConflict in k8s.io/kube-scheduler/framework/types.go)
  when protocol and port are equal and either hostIP is 0.0.0.0 or both are the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from priogate.preemption.selectors import LabelSelector, parse_label_selector

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
BIND_ALL = "0.0.0.0"  # DefaultBindAllHostIP


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    selector: LabelSelector | None  # None: matches no pod
    namespaces: frozenset[str]  # explicit, or the owner's own namespace when nothing is named
    all_namespaces: bool  # namespaceSelector: {}
    namespace_labels: bool  # a non-empty namespaceSelector: matching needs Namespace labels
    topology_key: str

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool | None:
        """Does the term select a pod of `namespace` with `labels`; None: cannot tell."""
        if self.selector is None or not self.selector.matches(labels):
            return False
        if self.all_namespaces or namespace in self.namespaces:
            return True
        return None if self.namespace_labels else False


@dataclass(frozen=True, slots=True)
class HostPort:
    ip: str
    protocol: str
    port: int

    def conflicts(self, other: HostPort) -> bool:
        return (
            self.protocol == other.protocol
            and self.port == other.port
            and (self.ip == BIND_ALL or other.ip == BIND_ALL or self.ip == other.ip)
        )


def _terms(raw: Any, namespace: str, where: str) -> tuple[AffinityTerm, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"{where} must be a list of terms")
    terms = []
    for term in raw:
        if not isinstance(term, Mapping):
            raise ValueError(f"{where}: a term must be an object")
        key = term.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where}: a term needs a topologyKey")
        selector = term.get("labelSelector")
        names = term.get("namespaces") or []
        if not isinstance(names, list):
            raise ValueError(f"{where}: namespaces must be a list")
        ns_selector = term.get("namespaceSelector")
        if ns_selector is not None and not isinstance(ns_selector, Mapping):
            raise ValueError(f"{where}: namespaceSelector must be an object")
        everywhere = ns_selector is not None and parse_label_selector(ns_selector, where).empty
        named = frozenset(str(n) for n in names)
        if not named and ns_selector is None:
            named = frozenset((namespace,))  # the term's owner's namespace (GetNamespaceLabelsSnapshot)
        terms.append(
            AffinityTerm(
                selector=None if selector is None else parse_label_selector(selector, where),
                namespaces=named,
                all_namespaces=everywhere,
                namespace_labels=ns_selector is not None and not everywhere,
                topology_key=key,
            )
        )
    return tuple(terms)


def parse_pod_affinity(
    spec: Mapping[str, Any], namespace: str, where: str
) -> tuple[tuple[AffinityTerm, ...], tuple[AffinityTerm, ...]]:
    """The required affinity and anti-affinity terms of a pod spec."""
    affinity = spec.get("affinity") or {}
    if not isinstance(affinity, Mapping):
        raise ValueError(f"{where}: affinity must be an object")
    out = []
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind) or {}
        if not isinstance(section, Mapping):
            raise ValueError(f"{where}: {kind} must be an object")
        required = section.get("requiredDuringSchedulingIgnoredDuringExecution")
        out.append(_terms(required, namespace, f"{where} {kind}"))
    return out[0], out[1]


def parse_host_ports(spec: Mapping[str, Any], where: str) -> tuple[HostPort, ...]:
    """The host ports a pod holds on its node while it runs (GetHostPorts)."""
    containers = [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    containers += [
        c
        for c in spec.get("initContainers") or []
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always"  # sidecars only
    ]
    ports: set[HostPort] = set()
    for container in containers:
        for port in container.get("ports") or []:
            if not isinstance(port, Mapping):
                raise ValueError(f"{where}: a container port must be an object")
            number = port.get("hostPort")
            if number is None:
                continue
            if not isinstance(number, int) or isinstance(number, bool):
                raise ValueError(f"{where}: hostPort must be an integer")
            if number > 0:
                ip = port.get("hostIP") or BIND_ALL
                ports.add(HostPort(str(ip), str(port.get("protocol") or "TCP"), number))
    return tuple(sorted(ports, key=lambda p: (p.protocol, p.port, p.ip)))
