"""The records preemption works on: what it needs of Nodes, Pods, PodGroups and
PodDisruptionBudgets, immutable and validated (parse.py makes them from API objects).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from priogate import priority as prio
from priogate.preemption.pod_affinity import AffinityTerm, HostPort
from priogate.preemption.qos import BURSTABLE
from priogate.preemption.selectors import LabelSelector, NodeSelectorTerm, Taint, Toleration
from priogate.preemption.spread import SpreadConstraint
from priogate.resources import ResourceList

NEVER = prio.PREEMPT_NEVER
DAEMONSET_POD = "DaemonSet pod"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    allocatable: ResourceList


@dataclass(frozen=True, slots=True)
class PodInfo:
    key: str  # "namespace/name"
    namespace: str
    name: str
    labels: Mapping[str, str]
    priority: int
    preemption_policy: str
    priority_note: str  # why the priority is a guess (unknown class), else ""
    requests: ResourceList
    node_name: str  # "" while pending
    nominated_node: str
    phase: str
    terminating: bool
    preempted_by_scheduler: bool  # DisruptionTarget=True: preempted by the scheduler or priogate
    start_time: float  # epoch seconds; +inf when unknown ("now", the least important)
    created: float
    protected: str  # why it can never be a victim ("DaemonSet pod", "mirror pod"), else ""
    opted_out: bool
    group: str  # "namespace/name" of the PodGroup it names, else ""
    node_selector: Mapping[str, str]
    affinity: tuple[NodeSelectorTerm, ...] | None  # required node affinity terms, if any
    tolerations: tuple[Toleration, ...]
    gated: bool  # has scheduling gates: the scheduler does not consider it yet
    # Facts only the optional policies read (priogate.preemption.policy):
    qos: str = BURSTABLE  # QoS class, as the kubelet computes it (qos.pod_qos)
    owner_pods: tuple[str, ...] = ()  # "namespace/name" of the Pods its ownerReferences name
    # PodScheduled=False since (lastTransitionTime, epoch seconds); +inf when not unschedulable
    unschedulable_since: float = math.inf
    spread: tuple[SpreadConstraint, ...] = ()  # hard topology spread constraints (spread.py)
    # Required inter-pod (anti-)affinity and host ports (pod_affinity.py): gang decisions honour
    # them (gang_fit.py).
    pod_affinity: tuple[AffinityTerm, ...] = ()
    pod_anti_affinity: tuple[AffinityTerm, ...] = ()
    host_ports: tuple[HostPort, ...] = ()

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

    @property
    def daemonset(self) -> bool:
        """Owned by a DaemonSet (its controller pins it to one node by node affinity)."""
        return self.protected == DAEMONSET_POD


@dataclass(frozen=True, slots=True)
class PodGroupInfo:
    key: str
    namespace: str
    name: str
    min_member: int
    priority: int | None  # None: no class named; the members' priority is used
    preemption_policy: str
    priority_note: str
    phase: str
    created: float


@dataclass(frozen=True, slots=True)
class PDBInfo:
    key: str
    namespace: str
    selector: LabelSelector | None
    disruptions_allowed: int
    disrupted_pods: frozenset[str]
