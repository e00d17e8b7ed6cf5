"""Label selectors, node selector terms, taints and tolerations: parsing and matching.

Semantics follow k8s.io/apimachinery/pkg/labels, k8s.io/component-helpers/scheduling/corev1
and the TaintToleration filter. Parsing validates, so matching never meets a bad operator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_SET_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
_NODE_OPERATORS = _SET_OPERATORS | {"Gt", "Lt"}
_TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})
# Only these effects keep a pod off a node at scheduling time.
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        # Gt / Lt: both sides must be integers, otherwise the requirement does not match.
        if not present:
            return False
        try:
            actual, bound = int(labels[self.key]), int(self.values[0])
        except ValueError:
            return False
        return actual > bound if self.operator == "Gt" else actual < bound


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...]

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    expressions: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]  # only metadata.name exists

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False  # an empty term matches nothing
        return all(r.matches(labels) for r in self.expressions) and all(
            r.matches({"metadata.name": node_name}) for r in self.fields
        )


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # "Equal" or "Exists"
    value: str
    effect: str  # "" tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


def tolerated(tolerations: tuple[Toleration, ...], taint: Taint) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


def node_affinity_matches(
    terms: tuple[NodeSelectorTerm, ...], node_name: str, labels: Mapping[str, str]
) -> bool:
    """Terms are ORed; an empty list matches nothing."""
    return any(term.matches(node_name, labels) for term in terms)


# ---- parsing ----------------------------------------------------------------------------------


def _requirement(raw: Any, where: str, operators: frozenset[str]) -> Requirement:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: a requirement must be an object")
    key, operator, values = raw.get("key"), raw.get("operator"), raw.get("values") or []
    if not isinstance(key, str) or not key:
        raise ValueError(f"{where}: requirement without key")
    if not _one_of(operator, operators):
        raise ValueError(f"{where}: unsupported operator {operator!r} for key {key}")
    if not isinstance(values, list):
        raise ValueError(f"{where}: values of {key} must be a list")
    values_t = tuple(str(v) for v in values)
    if operator in ("In", "NotIn") and not values_t:
        raise ValueError(f"{where}: operator {operator} on {key} needs values")
    if operator in ("Exists", "DoesNotExist") and values_t:
        raise ValueError(f"{where}: operator {operator} on {key} takes no values")
    if operator in ("Gt", "Lt") and len(values_t) != 1:
        raise ValueError(f"{where}: operator {operator} on {key} needs exactly one value")
    return Requirement(key, operator, values_t)


def parse_label_selector(raw: Any, where: str) -> LabelSelector:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: selector must be an object")
    match_labels = raw.get("matchLabels") or {}
    expressions = raw.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, list):
        raise ValueError(f"{where}: selector must have a matchLabels map and a matchExpressions list")
    requirements = [Requirement(str(k), "In", (str(v),)) for k, v in match_labels.items()]
    requirements += [_requirement(e, f"{where} selector", _SET_OPERATORS) for e in expressions]
    return LabelSelector(tuple(requirements))


def parse_node_selector_terms(raw: Any, where: str) -> tuple[NodeSelectorTerm, ...]:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("nodeSelectorTerms") or [], list):
        raise ValueError(f"{where}: required node affinity needs a nodeSelectorTerms list")
    terms = []
    for term in raw.get("nodeSelectorTerms") or []:
        if not isinstance(term, Mapping):
            raise ValueError(f"{where}: a nodeSelectorTerm must be an object")
        expressions = tuple(
            _requirement(e, f"{where} node affinity", _NODE_OPERATORS)
            for e in term.get("matchExpressions") or []
        )
        fields = tuple(
            _requirement(f, f"{where} node affinity", frozenset({"In", "NotIn"}))
            for f in term.get("matchFields") or []
        )
        for f in fields:
            if f.key != "metadata.name":
                raise ValueError(f"{where}: matchFields supports only metadata.name, not {f.key}")
        terms.append(NodeSelectorTerm(expressions, fields))
    return tuple(terms)


def parse_taints(raw: Any, where: str) -> tuple[Taint, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"{where}: taints must be a list")
    taints = []
    for t in raw:
        if not isinstance(t, Mapping) or not t.get("key") or not _one_of(t.get("effect"), _TAINT_EFFECTS):
            raise ValueError(f"{where}: a taint needs a key and an effect of {sorted(_TAINT_EFFECTS)}")
        taints.append(Taint(str(t["key"]), str(t.get("value") or ""), t["effect"]))
    return tuple(taints)


def parse_tolerations(raw: Any, where: str) -> tuple[Toleration, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"{where}: tolerations must be a list")
    tolerations = []
    for t in raw:
        if not isinstance(t, Mapping):
            raise ValueError(f"{where}: a toleration must be an object")
        operator = t.get("operator") or "Equal"
        effect = t.get("effect") or ""
        if not _one_of(operator, {"Equal", "Exists"}) or (effect and not _one_of(effect, _TAINT_EFFECTS)):
            raise ValueError(f"{where}: unsupported toleration {dict(t)!r}")
        tolerations.append(Toleration(str(t.get("key") or ""), operator, str(t.get("value") or ""), effect))
    return tuple(tolerations)


def _one_of(value: Any, allowed: frozenset[str] | set[str]) -> bool:
    return isinstance(value, str) and value in allowed
