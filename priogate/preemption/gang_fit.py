"""What a gang decision must honour besides resources and static filters: required inter-pod
affinity and anti-affinity (kube-scheduler's InterPodAffinity filter) and host ports (its
NodePorts filter), of the members being placed and of the pods already there. The result is
either a refusal (a constraint the engine cannot model, said in words for the PodGroup's
Event) or the state the decision runs on plus, per member, the nodes it may not use.

Exact where a constraint is per node (host ports; anti-affinity over a topology key whose
domains are single nodes, as kubernetes.io/hostname is): it becomes resource dimensions of
the state the decision runs on, so packing, the reprieve and victim choice handle it as they
handle cpu, a victim that blocks a member included:

- a host port: per (protocol, port) one dimension per specific hostIP used and one for
  0.0.0.0, each of capacity 1 per node; a pod bound to 0.0.0.0 takes 1 of every one of them,
  a pod bound to an IP takes 1 of that IP's: two pods conflict exactly when
  HostPortInfo.CheckConflict says so (same protocol and port, same IP or either 0.0.0.0);
- anti-affinity over a per-node key, per member shape: capacity B (the members of that shape
  being placed) on every node carrying the key (B*B on a node without it: no domain, no
  conflict), a member takes 1, or B when the members exclude each other, and a pod that
  excludes them (their term selects it, or its term selects them:
  satisfyPodAntiAffinity / satisfyExistingPodsAntiAffinity) takes B. A member then fits a node
  only when no such pod stays there.

Over a key whose domains span nodes (topology.kubernetes.io/zone), a domain where a pod
excludes the members is barred for them (exact when that pod cannot be a victim; otherwise
the domain is left out rather than cleared, a conservative choice), and members that exclude
each other there are refused (one member per zone is not a packing the engine does).
Required affinity allows a member only where a pod its terms select stays whatever the
decision takes (higher or equal priority, protected, the group's own placed members, opted
out in hard mode); when no pod anywhere matches and the member matches its own terms, a
lone member may go anywhere that has the keys (satisfyPodAffinity's "first pod in a
series"), several are refused (co-location is not modelled). A member's terms over other
topology keys or with a namespaceSelector that needs Namespace labels, and members of
different shapes excluding each other, are refused. Such a term on a placed pod that may
select a member bars that pod's domain instead: refusing would let any tenant's pod stop every
gang's decision (the design's trust rule: nothing a tenant writes decides a preemption), and
barring never counts on a node the member cannot use.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from priogate.preemption.pod_affinity import HOSTNAME, ZONE, AffinityTerm, HostPort
from priogate.preemption.records import PodInfo
from priogate.preemption.state import ClusterState, node_state, occupies, screen_rows

MODELLED_KEYS = (HOSTNAME, ZONE)


@dataclass(frozen=True)
class GangFit:
    state: ClusterState  # the state to decide on (with the constraint dimensions, if any)
    barred: Mapping[str, Mapping[str, str]]  # member key -> node -> why it may not go there


def anti_pods(state: ClusterState) -> Mapping[str, PodInfo]:
    """Pod key -> the pods with required anti-affinity: the live state keeps them current
    (live_records); a snapshot's state finds them once."""
    found = state.memo.get("anti_affinity")
    if found is None:
        found = state.memo["anti_affinity"] = {k: p for k, p in state.pods.items() if p.pod_anti_affinity}
    return found


def _kind(pod: PodInfo) -> tuple:
    return (pod.namespace, tuple(sorted(pod.labels.items())), pod.pod_affinity, pod.pod_anti_affinity)


def _present(state: ClusterState, pod: PodInfo, priority: int) -> str:
    """The node a pod counts on for the members: bound there, or nominated there with a
    priority the members must respect (the scheduler adds those, addNominatedPods); ""."""
    if occupies(pod, state.nodes):
        return pod.node_name
    if not pod.node_name and pod.nominated_node in state.nominated and pod.priority >= priority:
        return pod.nominated_node
    return ""


def _per_node(state: ClusterState, key: str) -> bool:
    values = [n.info.labels[key] for n in state.nodes.values() if key in n.info.labels]
    return len(values) == len(set(values))


def _anti_between(member: PodInfo, other: PodInfo, *, member_pair: bool) -> tuple[set[str], set[str], str]:
    """Keys over which `member` and `other` surely exclude each other; keys over which a placed
    `other` may exclude the member by a term the engine cannot evaluate (its domain is then
    left out, never cleared: another tenant's pod cannot stop a gang's decision nor be taken
    on a guess); or a refusal, for such a term of a member's own."""
    keys: set[str] = set()
    maybe: set[str] = set()
    for owner, target, terms, members_own in (
        (member, other, member.pod_anti_affinity, True),
        (other, member, other.pod_anti_affinity, member_pair),
    ):
        for term in terms:
            hit = term.matches(target.namespace, target.labels)
            if hit is False:
                continue
            known = hit is True and term.topology_key in MODELLED_KEYS
            if not members_own:
                (keys if known else maybe).add(term.topology_key)
            elif hit is None:
                return (
                    keys,
                    maybe,
                    (
                        f"the required pod anti-affinity of {owner.key} may select {target.key} through a "
                        "namespaceSelector, which needs Namespace labels the engine does not read"
                    ),
                )
            elif not known:
                return (
                    keys,
                    maybe,
                    (
                        f"the required pod anti-affinity of {owner.key} selects {target.key} over "
                        f"topologyKey {term.topology_key}, which gang preemption does not model "
                        f"(only {HOSTNAME} and {ZONE})"
                    ),
                )
            else:
                keys.add(term.topology_key)
    return keys, maybe, ""


def _port_dims(ports: Sequence[HostPort], pairs: Mapping[tuple[str, int], tuple[str, ...]]) -> set[str]:
    taken: set[str] = set()
    for port in ports:
        ips = pairs.get((port.protocol, port.port))
        if ips is None:
            continue
        prefix = f"hostport:{port.protocol}/{port.port}/"
        taken.update(prefix + ip for ip in (ips if port.ip == "0.0.0.0" else (port.ip,)))
    return taken


def gang_fit(
    state: ClusterState, members: Sequence[PodInfo], own: Collection[str], priority: int, *, hard: bool
) -> GangFit | str:
    """The constraints of placing `members` (the needed ones) at `priority`; `own`: keys of
    every pod of their group (its placed ones are never victims); `hard`: opted-out pods are
    never victims."""
    placing = {m.key for m in members}
    constrained = any(m.pod_affinity or m.pod_anti_affinity or m.host_ports for m in members)
    excluding = [p for key, p in anti_pods(state).items() if key not in placing]
    if not constrained and not excluding:
        return GangFit(state, {})
    # Members without terms or ports meet only pods whose anti-affinity may select them.
    others = [p for p in state.pods.values() if p.key not in placing] if constrained else excluding
    present = {p.key: node for p in others if (node := _present(state, p, priority))}
    kinds: dict[tuple, list[PodInfo]] = {}
    for member in members:
        kinds.setdefault(_kind(member), []).append(member)
    barred: dict[str, dict[str, str]] = {}
    extra: dict[str, dict[str, int]] = {}  # pod key -> synthetic dimension -> amount
    capacity: dict[str, tuple[int, int]] = {}  # dimension -> (with the key, without)
    node_labels = {name: n.info.labels for name, n in state.nodes.items()}
    singles: dict[str, bool] = {}

    def per_node(key: str) -> bool:
        if key not in singles:
            singles[key] = _per_node(state, key)
        return singles[key]

    def bar(kind: list[PodInfo], key: str, value: str, why: str) -> None:
        for name, labels in node_labels.items():
            if labels.get(key) == value:
                for member in kind:
                    barred.setdefault(member.key, {}).setdefault(name, why)

    kind_list = list(kinds.values())
    for i, kind in enumerate(kind_list):
        first, count = kind[0], len(kind)
        for term in (*first.pod_affinity, *first.pod_anti_affinity):
            if term.topology_key not in MODELLED_KEYS:
                return (
                    f"member {first.key} has a required pod (anti-)affinity over topologyKey "
                    f"{term.topology_key}, which gang preemption does not model (only {HOSTNAME} and {ZONE})"
                )
        for j, other_kind in enumerate(kind_list):
            keys, _, refusal = _anti_between(first, other_kind[0], member_pair=True)
            if refusal:
                return refusal
            if keys and j != i:
                return (
                    f"members {first.key} and {other_kind[0].key} differ and exclude each other by "
                    "required pod anti-affinity, which gang preemption does not model"
                )
            for key in keys:
                if not per_node(key) and count > 1:
                    return (
                        f"members such as {first.key} exclude each other by required pod anti-affinity "
                        f"over {key} (one member per domain), which gang preemption does not model"
                    )
                if per_node(key):
                    dim = f"anti:{i}:{key}"
                    capacity[dim] = (count, count * count)
                    for member in kind:
                        extra.setdefault(member.key, {})[dim] = count
        for other in others:
            node = present.get(other.key)
            if not node:
                continue
            keys, maybe, refusal = _anti_between(first, other, member_pair=False)
            if refusal:
                return refusal
            for key in maybe:
                value = node_labels[node].get(key)
                if value is not None:
                    why = f"the required pod anti-affinity of {other.key} over {key} may exclude it"
                    bar(kind, key, value, why)
            for key in keys:
                value = node_labels[node].get(key)
                if value is None:
                    continue  # no domain on its node: it excludes nothing
                if per_node(key):
                    dim = f"anti:{i}:{key}"
                    capacity.setdefault(dim, (count, count * count))
                    for member in kind:
                        extra.setdefault(member.key, {}).setdefault(dim, 1)
                    extra.setdefault(other.key, {})[dim] = count
                else:
                    bar(kind, key, value, f"required pod anti-affinity with {other.key} in {key}={value}")
        refusal = _affinity(state, kind, others, present, own, priority, hard, barred)
        if refusal:
            return refusal
    _ports(members, others, present, extra, capacity)
    if not capacity:
        return GangFit(state, barred)
    return GangFit(_augmented(state, extra, capacity), barred)


def _affinity(
    state: ClusterState,
    kind: list[PodInfo],
    others: Sequence[PodInfo],
    present: Mapping[str, str],
    own: Collection[str],
    priority: int,
    hard: bool,
    barred: dict[str, dict[str, str]],
) -> str:
    """Bar the nodes where a member's required affinity is not sure to hold; or a refusal."""
    first = kind[0]
    terms = first.pod_affinity
    if not terms:
        return ""
    stays: list[set[str]] = []  # per term: the domains where a selected pod surely stays
    matched_any = False
    for term in terms:
        domains: set[str] = set()
        for other in others:
            node = present.get(other.key)
            if not node or not occupies(other, state.nodes):
                continue
            hit = term.matches(other.namespace, other.labels)
            if hit is None:
                return (
                    f"the required pod affinity of member {first.key} may select {other.key} through a "
                    "namespaceSelector, which needs Namespace labels the engine does not read"
                )
            value = state.nodes[node].info.labels.get(term.topology_key)
            if not hit or value is None:
                continue
            matched_any = True
            if _stays(other, own, priority, hard):
                domains.add(value)
        stays.append(domains)
    if not matched_any and all(_self_match(term, first) for term in terms):
        if len(kind) > 1:
            return (
                f"members such as {first.key} require pod affinity to each other (co-location), "
                "which gang preemption does not model"
            )
        for name, node in state.nodes.items():
            if any(t.topology_key not in node.info.labels for t in terms):
                why = "node lacks a topology key of its affinity"
                for member in kind:
                    barred.setdefault(member.key, {}).setdefault(name, why)
        return ""
    for name, node in state.nodes.items():
        labels = node.info.labels
        for term, domains in zip(terms, stays, strict=True):
            if labels.get(term.topology_key) not in domains:
                why = f"no pod its required pod affinity selects surely stays in {term.topology_key}"
                for member in kind:
                    barred.setdefault(member.key, {}).setdefault(name, why)
                break
    return ""


def _self_match(term: AffinityTerm, pod: PodInfo) -> bool:
    return term.matches(pod.namespace, pod.labels) is True


def _stays(pod: PodInfo, own: Collection[str], priority: int, hard: bool) -> bool:
    """Is the pod sure not to be a victim of the decision nor to leave anyway."""
    if pod.terminating:
        return False
    return pod.key in own or pod.priority >= priority or bool(pod.protected) or (hard and pod.opted_out)


def _ports(
    members: Sequence[PodInfo],
    others: Sequence[PodInfo],
    present: Mapping[str, str],
    extra: dict[str, dict[str, int]],
    capacity: dict[str, tuple[int, int]],
) -> None:
    """Host port dimensions for the (protocol, port) pairs the members use."""
    wanted = {(p.protocol, p.port) for m in members for p in m.host_ports}
    if not wanted:
        return
    holders = [*members, *(o for o in others if o.host_ports and present.get(o.key))]
    ips: dict[tuple[str, int], set[str]] = {pair: {"0.0.0.0"} for pair in wanted}
    for pod in holders:
        for port in pod.host_ports:
            if (port.protocol, port.port) in ips:
                ips[(port.protocol, port.port)].add(port.ip)
    pairs = {pair: tuple(sorted(found)) for pair, found in ips.items()}
    for pair, found in pairs.items():
        for ip in found:
            capacity[f"hostport:{pair[0]}/{pair[1]}/{ip}"] = (1, 1)
    for pod in holders:
        for dim in _port_dims(pod.host_ports, pairs):
            extra.setdefault(pod.key, {})[dim] = 1


def _augmented(
    state: ClusterState, extra: Mapping[str, Mapping[str, int]], capacity: Mapping[str, tuple[int, int]]
) -> ClusterState:
    """`state` with the constraint dimensions appended: every node rebuilt (the cost of a
    constrained decision: one pass over the cluster's pods)."""
    names = tuple(sorted(capacity))
    dims = state.dims + names
    zeros = (0,) * len(names)
    vectors = {
        key: vec + (tuple(extra[key].get(n, 0) for n in names) if key in extra else zeros)
        for key, vec in state.vectors.items()
    }
    nodes = {}
    for name, old in state.nodes.items():
        node = node_state(old.info, list(old.pods), vectors, state.pdb_matches, dims)
        labels = old.info.labels
        caps = tuple(capacity[n][0] if _has_key(n, labels) else capacity[n][1] for n in names)
        alloc = node.alloc[: len(state.dims)] + caps
        free = tuple(a - r for a, r in zip(alloc, node.requested, strict=True))
        nodes[name] = dataclasses.replace(node, alloc=alloc, free=free)
    return dataclasses.replace(
        state, dims=dims, nodes=nodes, rows=screen_rows(nodes), vectors=vectors, memo={}
    )


def _has_key(dim: str, labels: Mapping[str, str]) -> bool:
    """Does a node carry the topology key of an anti-affinity dimension (ports: always)."""
    if not dim.startswith("anti:"):
        return True
    return dim.split(":", 2)[2] in labels
