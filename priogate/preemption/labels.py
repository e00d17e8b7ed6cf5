"""The placed pods by namespace and by label, so a label selector finds the pods it may match
without a walk over every pod of the cluster (hard topology spread counts the pods matching
its selector on every node, spread_fit.py).

"Placed": occupying a known node (state.occupies), the pods of NodeState.pods. Built once
per cluster state on first use; the live state keeps its own current from watch events.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from priogate.preemption.records import PodInfo
from priogate.preemption.selectors import LabelSelector
from priogate.preemption.state import ClusterState


@dataclass
class LabelIndex:
    by_namespace: dict[str, dict[str, PodInfo]] = field(default_factory=dict)  # ns -> key -> pod
    by_label: dict[tuple[str, str, str], dict[str, PodInfo]] = field(default_factory=dict)  # ns, k, v

    def add(self, pod: PodInfo) -> None:
        self.by_namespace.setdefault(pod.namespace, {})[pod.key] = pod
        for label in pod.labels.items():
            self.by_label.setdefault((pod.namespace, *label), {})[pod.key] = pod

    def remove(self, pod: PodInfo) -> None:
        _drop(self.by_namespace, pod.namespace, pod.key)
        for label in pod.labels.items():
            _drop(self.by_label, (pod.namespace, *label), pod.key)

    def candidates(self, namespace: str, selector: LabelSelector) -> Iterable[PodInfo]:
        """A superset of the pods of `namespace` that `selector` matches: those carrying one
        of the values of its first `In` requirement (matchLabels are such), else all."""
        for requirement in selector.requirements:
            if requirement.operator == "In":
                found: dict[str, PodInfo] = {}
                for value in requirement.values:
                    found.update(self.by_label.get((namespace, requirement.key, value), {}))
                return found.values()
        return self.by_namespace.get(namespace, {}).values()


def _drop(index: dict, key: object, pod_key: str) -> None:
    pods = index.get(key)
    if pods is not None:
        pods.pop(pod_key, None)
        if not pods:
            del index[key]


def build_label_index(pods: Iterable[PodInfo]) -> LabelIndex:
    index = LabelIndex()
    for pod in pods:
        index.add(pod)
    return index


def label_index(state: ClusterState) -> LabelIndex:
    """The state's index of placed pods, built on first use (the live state supplies its own)."""
    cached = state.memo.get("labels")
    if cached is None:
        cached = state.memo["labels"] = build_label_index(state.bound_pods())
    return cached
