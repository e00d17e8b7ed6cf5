"""The placed pods by namespace and by label, so a label selector finds the pods it may match
without a walk over every pod of the cluster (hard topology spread counts the pods matching
its selector on every node, spread_fit.py).

"Placed": occupying a known node (state.occupies), the pods of NodeState.pods. The live
state keeps a complete index current from watch events; a snapshot's state indexes a
namespace when a decision first asks for it (one pass over the placed pods, instead of
indexing every pod of the cluster for the one namespace a spread constraint looks at).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from priogate.preemption.records import PodInfo
from priogate.preemption.selectors import LabelSelector
from priogate.preemption.state import ClusterState


@dataclass
class Namespace:
    pods: dict[str, PodInfo] = field(default_factory=dict)  # key -> pod
    by_label: dict[tuple[str, str], dict[str, PodInfo]] = field(default_factory=dict)  # (k, v) -> pods

    def add(self, pod: PodInfo) -> None:
        self.pods[pod.key] = pod
        for label in pod.labels.items():
            self.by_label.setdefault(label, {})[pod.key] = pod

    def remove(self, pod: PodInfo) -> None:
        self.pods.pop(pod.key, None)
        for label in pod.labels.items():
            pods = self.by_label.get(label)
            if pods is not None:
                pods.pop(pod.key, None)
                if not pods:
                    del self.by_label[label]

    def candidates(self, selector: LabelSelector) -> Iterable[PodInfo]:
        """A superset of the pods `selector` matches: those carrying one of the values of its
        first `In` requirement (matchLabels are such), else all."""
        for requirement in selector.requirements:
            if requirement.operator == "In":
                found: dict[str, PodInfo] = {}
                for value in requirement.values:
                    found.update(self.by_label.get((requirement.key, value), {}))
                return found.values()
        return self.pods.values()


class LabelIndex:
    """Namespace name -> its placed pods. Complete when kept with add/remove; given a state,
    each namespace is filled from it on first use instead."""

    def __init__(self, state: ClusterState | None = None) -> None:
        self.namespaces: dict[str, Namespace] = {}
        self._state = state

    def namespace(self, name: str) -> Namespace:
        found = self.namespaces.get(name)
        if found is None:
            found = Namespace()
            if self._state is not None:
                for pod in self._state.bound_pods():
                    if pod.namespace == name:
                        found.add(pod)
                self.namespaces[name] = found  # empty or not: the state never changes
        return found

    def add(self, pod: PodInfo) -> None:
        self.namespaces.setdefault(pod.namespace, Namespace()).add(pod)

    def remove(self, pod: PodInfo) -> None:
        namespace = self.namespaces.get(pod.namespace)
        if namespace is not None:
            namespace.remove(pod)
            if not namespace.pods:
                del self.namespaces[pod.namespace]


def build_label_index(pods: Iterable[PodInfo]) -> LabelIndex:
    """A complete index of `pods`."""
    index = LabelIndex()
    for pod in pods:
        index.add(pod)
    return index


def label_index(state: ClusterState) -> LabelIndex:
    """The state's index of placed pods: the live state's own, else one filled on demand."""
    cached = state.memo.get("labels")
    if cached is None:
        cached = state.memo["labels"] = LabelIndex(state)
    return cached
