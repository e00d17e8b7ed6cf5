"""A pod's hard topology spread constraints (`whenUnsatisfiable: DoNotSchedule`), parsed the
way kube-scheduler's PodTopologySpread plugin reads them (filterTopologySpreadConstraints in
pkg/scheduler/framework/plugins/podtopologyspread/common.go):

- a nil labelSelector matches nothing; an empty one matches every pod but counts none in
  PreFilter (countPodsMatchSelector skips an empty selector), as upstream;
- matchLabelKeys adds `key In (the pod's value)` for each key the pod carries, unless the
  selector is nil (mergeLabelSetWithSelector keeps Nothing as it is);
- minDomains defaults to 1, nodeAffinityPolicy to Honor, nodeTaintsPolicy to Ignore.

ScheduleAnyway constraints only score nodes: they are dropped here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from priogate.preemption.selectors import LabelSelector, Requirement, parse_label_selector

DO_NOT_SCHEDULE = "DoNotSchedule"
HONOR = "Honor"
IGNORE = "Ignore"
_POLICIES = frozenset({HONOR, IGNORE})


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    selector: LabelSelector | None  # None: labelSelector absent, matches nothing
    min_domains: int = 1
    honor_affinity: bool = True  # nodeAffinityPolicy: Honor
    honor_taints: bool = False  # nodeTaintsPolicy: Ignore

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Selector.Matches: whether a pod counts when added or removed (AddPod/RemovePod)."""
        return self.selector is not None and self.selector.matches(labels)

    @property
    def counts(self) -> bool:
        """Whether PreFilter counts any pod (an empty selector counts none)."""
        return self.selector is not None and not self.selector.empty


def parse_spread(raw: Any, pod_labels: Mapping[str, str], where: str) -> tuple[SpreadConstraint, ...]:
    """The DoNotSchedule constraints of a pod's spec.topologySpreadConstraints."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"{where}: spec.topologySpreadConstraints must be a list")
    out = []
    for index, item in enumerate(raw):
        at = f"{where} topologySpreadConstraints[{index}]"
        if not isinstance(item, Mapping):
            raise ValueError(f"{at} must be an object")
        if item.get("whenUnsatisfiable") != DO_NOT_SCHEDULE:
            continue
        max_skew = item.get("maxSkew")
        key = item.get("topologyKey")
        min_domains = item.get("minDomains", 1)
        if min_domains is None:
            min_domains = 1
        if not _positive_int(max_skew) or not _positive_int(min_domains):
            raise ValueError(f"{at}: maxSkew and minDomains must be positive integers")
        if not isinstance(key, str) or not key:
            raise ValueError(f"{at}: topologyKey must be a non-empty string")
        affinity = item.get("nodeAffinityPolicy") or HONOR
        taints = item.get("nodeTaintsPolicy") or IGNORE
        if affinity not in _POLICIES or taints not in _POLICIES:
            raise ValueError(f"{at}: node inclusion policies must be Honor or Ignore")
        raw_selector = item.get("labelSelector")
        selector = None if raw_selector is None else parse_label_selector(raw_selector, at)
        keys = item.get("matchLabelKeys") or []
        if not isinstance(keys, list):
            raise ValueError(f"{at}: matchLabelKeys must be a list")
        if selector is not None:
            merged = tuple(Requirement(str(k), "In", (pod_labels[k],)) for k in keys if k in pod_labels)
            if merged:
                selector = LabelSelector(merged + selector.requirements)
        out.append(
            SpreadConstraint(
                max_skew=max_skew,
                topology_key=key,
                selector=selector,
                min_domains=min_domains,
                honor_affinity=affinity == HONOR,
                honor_taints=taints == HONOR,
            )
        )
    return tuple(out)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
