"""`kubectl priogate simulate`: the engine's decisions on the live cluster, optionally with
hypothetical pods and PodGroups added ("what happens if I submit this?"). Pure: the caller
reads the cluster; the decisions come from priogate.preemption.engine.simulate, the entry
point `python -m controller simulate` uses too.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubectl_priogate.output import NONE, shown, table
from priogate.podgroup import Phase
from priogate.preemption.engine import Result, simulate
from priogate.preemption.policy import DEFAULT_POLICY, PreemptionPolicy
from priogate.preemption.snapshot import Snapshot
from priogate.preemption.units import GROUP_PREFIX
from priogate.preemption.unmodelled import NOT_MODELLED

HYPOTHETICAL_KINDS = ("Pod", "PodGroup")
GENERATED_SUFFIX = "hypothetical"


class UsageError(ValueError):
    """The -f file cannot be simulated as given."""


@dataclass
class Cluster:
    """The live objects of the snapshot's kinds, as listed."""

    nodes: list[Mapping[str, Any]] = field(default_factory=list)
    pods: list[Mapping[str, Any]] = field(default_factory=list)
    podgroups: list[Mapping[str, Any]] = field(default_factory=list)
    pdbs: list[Mapping[str, Any]] = field(default_factory=list)
    priority_classes: list[Mapping[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Hypothetical:
    pods: tuple[dict[str, Any], ...]
    podgroups: tuple[dict[str, Any], ...]

    @property
    def preemptors(self) -> tuple[str, ...]:
        """The engine's keys for them: pods as "ns/name", groups as "podgroup:ns/name"."""
        return tuple(_key(p) for p in self.pods) + tuple(GROUP_PREFIX + _key(g) for g in self.podgroups)


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


def hypothetical(
    objects: Iterable[Mapping[str, Any]],
    *,
    namespace: str,
    namespace_explicit: bool,
    now: str,
    live: Cluster,
) -> Hypothetical:
    """The -f objects as they would be right after creation: in `namespace` unless they name
    one (a different one than an explicit -n is refused, as `kubectl apply` refuses it),
    created `now`, with no status, so pending; a PodGroup without a phase is taken as admitted
    (Inqueue), since the engine leaves a Pending group to the enqueue step and the question is
    what preemption would do for it."""
    taken = {_key(o) for o in live.pods}
    taken_groups = {_key(o) for o in live.podgroups}
    pods: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    for index, original in enumerate(objects):
        kind = original.get("kind")
        if kind not in HYPOTHETICAL_KINDS:
            raise UsageError(
                f"item {index}: simulate -f takes Pods and PodGroups, not {kind or 'an object without kind'}"
            )
        obj = copy.deepcopy(dict(original))
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise UsageError(f"item {index}: metadata must be an object")
        given = meta.get("namespace")
        if given and namespace_explicit and given != namespace:
            raise UsageError(
                f'the namespace from the provided object "{given}" does not match the namespace '
                f"\"{namespace}\". You must pass '--namespace={given}' to perform this operation."
            )
        meta["namespace"] = given or namespace
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise UsageError(f"item {index}: {kind} needs metadata.name or metadata.generateName")
            meta["name"] = f"{meta['generateName']}{GENERATED_SUFFIX}"
        meta["creationTimestamp"] = now
        for server_field in ("uid", "resourceVersion", "deletionTimestamp"):
            meta.pop(server_field, None)
        key = _key(obj)
        if kind == "Pod":
            if key in taken:
                raise UsageError(f'pods "{meta["name"]}" already exists in namespace {meta["namespace"]}')
            taken.add(key)
            obj["status"] = {"phase": "Pending"}
            pods.append(obj)
        else:
            if key in taken_groups:
                raise UsageError(
                    f'podgroups.scheduling.volcano.sh "{meta["name"]}" already exists in namespace '
                    f"{meta['namespace']}"
                )
            taken_groups.add(key)
            phase = (obj.get("status") or {}).get("phase") or Phase.INQUEUE
            obj["status"] = {"phase": str(phase)}
            groups.append(obj)
    return Hypothetical(tuple(pods), tuple(groups))


def decide(
    live: Cluster,
    extra: Hypothetical | None = None,
    *,
    policy: PreemptionPolicy = DEFAULT_POLICY,
    explain: bool = False,
    now: float | None = None,
) -> Result:
    """The engine's decisions for the live cluster plus `extra`, as of `now` (epoch seconds;
    read only by --preemption-start-delay). Raises ValueError for an object the snapshot
    cannot read."""
    snapshot = Snapshot.from_objects(
        nodes=live.nodes,
        pods=[*live.pods, *(extra.pods if extra else ())],
        podgroups=[*live.podgroups, *(extra.podgroups if extra else ())],
        pdbs=live.pdbs,
        priority_classes=live.priority_classes,
    )
    return simulate(snapshot, policy=policy, explain=explain, now=now)


def report(result: Result, extra: Hypothetical | None, *, explain: bool) -> dict[str, Any]:
    """Result.to_json (the controller CLI's output) plus, for each hypothetical preemptor, what
    happened to it: preempt, unresolved, fits (no preemption needed) or none (not a preemptor
    on its own: a member its group preempts for, or not pending)."""
    data = result.to_json(explain=explain)
    data["notModelled"] = NOT_MODELLED
    if extra is not None:
        status = {o.preemptor: o.status for o in result.outcomes}
        members = {pod for outcome in result.outcomes for pod in outcome.placements}
        data["hypothetical"] = [
            {
                "preemptor": key,
                "status": status.get(key) or ("member" if key in members else "none"),
            }
            for key in extra.preemptors
        ]
    return data


def render_table(data: Mapping[str, Any]) -> str:
    """Decisions first, then what stays unresolved, then (--explain) why other nodes lost."""
    new = {h["preemptor"] for h in data.get("hypothetical") or []}
    rows = []
    for d in data["decisions"]:
        placed = d.get("nominatedNode") or ",".join(sorted(set(d["placements"].values())))
        rows.append(
            [
                _mark(d["preemptor"], new),
                "preempt",
                placed or NONE,
                ",".join(d["victims"]) or NONE,
                d["reason"],
            ]
        )
    for u in data["unresolved"]:
        rows.append([_mark(u["preemptor"], new), "unresolved", NONE, NONE, u["reason"]])
    for h in data.get("hypothetical") or []:
        if h["status"] == "fits":
            rows.append([_mark(h["preemptor"], new), "fits", NONE, NONE, "fits without preemption"])
        elif h["status"] in ("none", "member"):
            rows.append([_mark(h["preemptor"], new), h["status"], NONE, NONE, _NOT_A_PREEMPTOR[h["status"]]])
    if rows:
        text = table(["preemptor", "decision", "node", "victims", "reason"], rows)
    else:
        text = "No preemption needed: no pending pod or PodGroup needs victims.\n"
    explained = [d for d in (*data["decisions"], *data["unresolved"]) if d.get("nodes")]
    for d in explained:
        text += f"\n{shown(d['preemptor'])}: other nodes\n"
        text += table(["node", "why"], [[n, why] for n, why in sorted(d["nodes"].items())])
    stats = data["stats"]
    text += f"\n{stats['nodes']} nodes, {stats['pods']} pods, decided in {stats['decisionSeconds']:.3f} s\n"
    if data.get("notModelled"):
        text += f"Not modelled: {data['notModelled']}.\n"
    return text


_NOT_A_PREEMPTOR = {
    "member": "placed as a member of its PodGroup's decision",
    "none": "not a preemptor on its own (a member of a group, or not pending)",
}


def _mark(key: str, new: set[str]) -> str:
    return f"{key} (new)" if key in new else key
