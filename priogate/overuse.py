"""Overused PodGroups: which bound members are beyond what a group's minimum needs, and which
of those to evict so that a waiting group of its namespace fits. Pure.

kube-batch's "Delay Pod Creation" design reserves a group's `minResources` when it enqueues it,
and notes that an operator "may create more Pods than spec.minResources; in such case, preempt
action will be enhanced to evict overused PodGroup to release resources". Volcano's gang plugin
draws the same line for its preempt action: a job loses tasks only while its ready tasks stay
above minAvailable, so the gang is never broken and only surplus members are taken.

Definitions (docs/controller.md, "Overused PodGroups"):

- a **member** counts when it is bound, unfinished and not terminating;
- a Running group's members are kept in this order until the kept ones number at least
  `minMember` (0 counts as 1) *and* their requests cover `minResources` on every resource it
  names: members that must not be evicted first (the opt-out label; soft mode: opted-out ones
  too, as they go last), then higher priority, then older (creation time), then name. The rest
  is its **surplus**; a group whose kept members cannot reach its minimum has none;
- a waiting group W takes surplus only of *its own namespace's* other groups, never of a group
  whose priority is above W's, and only members whose priority equals W's: a lower-priority
  pod does not count against W's capacity (gang preemption takes its place once W is Inqueue),
  and a higher-priority pod is never taken for W;
- surplus is evicted lowest priority first, then newest first (Volcano's victim queue puts the
  least important job first and, within a job, the reverse of its task order), each member
  only if it frees some of what W still lacks, and only when the chosen members cover all of
  it: an eviction that would not let W in evicts nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from priogate.resources import ResourceList

ZERO = Fraction(0)


@dataclass(frozen=True)
class Member:
    name: str
    uid: str
    priority: int
    created_at: str  # metadata.creationTimestamp (RFC 3339 UTC: sorts as text)
    requests: ResourceList
    protected: bool = False  # never evicted (the opt-out label, hard mode)
    last_resort: bool = False  # evicted after every other surplus member (opt-out, soft mode)

    def keep_order(self) -> tuple[int, int, str, str]:
        return (0 if self.protected or self.last_resort else 1, -self.priority, self.created_at, self.name)

    def evict_order(self) -> tuple[int, int, str, str]:
        """Lowest priority first, then newest first; opted-out members (soft mode) last."""
        return (1 if self.last_resort else 0, self.priority, _newest_first(self.created_at), self.name)


def _newest_first(created_at: str) -> str:
    # Sorting by the complement of each character puts later timestamps first.
    return "".join(chr(0x10FFFF - ord(c)) for c in created_at)


def _covers(amounts: Mapping[str, Fraction], wanted: Mapping[str, Fraction]) -> bool:
    return all(amounts.get(name, ZERO) >= amount for name, amount in wanted.items())


def surplus(members: Sequence[Member], min_member: int, min_resources: ResourceList) -> list[Member]:
    """The members beyond the group's minimum, in eviction order (protected ones included: the
    caller may not evict them, but they are surplus). Empty when the members cannot reach the
    minimum at all."""
    kept: dict[str, Fraction] = {}
    ordered = sorted(members, key=Member.keep_order)
    need = max(min_member, 1)
    for count, member in enumerate(ordered, start=1):
        for name, amount in member.requests.items():
            kept[name] = kept.get(name, ZERO) + amount
        if count >= need and _covers(kept, min_resources):
            return sorted(ordered[count:], key=Member.evict_order)
    return []


@dataclass(frozen=True)
class Candidate:
    group: str  # the overused group's name (its namespace is the waiting group's)
    member: Member


def candidates(waiting_priority: int, groups: Iterable[tuple[str, int, Sequence[Member]]]) -> list[Candidate]:
    """The surplus members (`groups`: each group's name, priority and surplus) a waiting group
    of `waiting_priority` may take: not of a group above it, of its own priority, not
    protected; in eviction order across groups."""
    found = [
        Candidate(name, m)
        for name, priority, members in groups
        if priority <= waiting_priority
        for m in members
        if m.priority == waiting_priority and not m.protected
    ]
    return sorted(found, key=lambda c: (*c.member.evict_order(), c.group))


def choose(shortfall: ResourceList, leaving: ResourceList, found: Sequence[Candidate]) -> list[Candidate]:
    """The fewest leading candidates, in order, whose requests cover `shortfall` (what the
    waiting group lacks) less `leaving` (what members already evicted or terminating will free);
    a candidate that frees none of what is still lacking is passed over. Empty when nothing is
    lacking or the candidates cannot cover it."""
    lacking = {n: a - leaving.get(n, ZERO) for n, a in shortfall.items() if a - leaving.get(n, ZERO) > 0}
    chosen: list[Candidate] = []
    for candidate in found:
        if not lacking:
            break
        requests = candidate.member.requests
        if not any(requests.get(name, ZERO) > 0 for name in lacking):
            continue
        chosen.append(candidate)
        for name in list(lacking):
            lacking[name] -= requests.get(name, ZERO)
            if lacking[name] <= 0:
                del lacking[name]
    return chosen if not lacking else []
