"""The gang reprieve loop: victim units go back one at a time while the gang stays placeable.

Free space is tracked per node in the gang's dimensions, with a placement of the members as
witness: returning a unit whose pods sit on nodes that the witness still fits is accepted
without a search; otherwise the packer looks for a new placement, and only when there is
none does the unit stay a victim. A PodGroup that cannot come back whole may come back with
only surplus members taken (it keeps minMember placed); else it goes whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from priogate.preemption.fit import Vector
from priogate.preemption.packing import Packer
from priogate.preemption.records import PodInfo
from priogate.preemption.units import Unit


@dataclass(frozen=True)
class Taken:
    unit: Unit
    pods: tuple[PodInfo, ...]  # the whole unit, or a group's surplus members
    whole: bool


class Reprieve:
    """Free space per node while units go back, with a member placement as witness."""

    def __init__(
        self,
        dims: Sequence[int],
        packer: Packer,
        free: dict[str, list[int]],
        placement: Mapping[str, str],
        vectors: Mapping[str, Vector],
    ) -> None:
        self.dims = dims
        self.packer = packer
        self.free = free
        self.vectors = vectors
        self.active = sorted(free)
        self.active_set = set(self.active)
        self.member_vectors = {key: cls.vector for cls in packer.classes for key in cls.members}
        self._witness(placement)

    def _witness(self, placement: Mapping[str, str]) -> None:
        self.placement = dict(placement)
        self.used: dict[str, list[int]] = {}
        for member, node in placement.items():
            row = self.used.setdefault(node, [0] * len(self.dims))
            for k, amount in enumerate(self.member_vectors[member]):
                row[k] += amount

    def _shift(self, pods: Iterable[PodInfo], sign: int) -> list[str]:
        touched = []
        for pod in pods:
            if pod.node_name not in self.active_set:
                continue  # a node that can no longer host a member: its space cannot matter
            room = self.free[pod.node_name]
            vec = self.vectors[pod.key]
            for k, d in enumerate(self.dims):
                room[k] += sign * vec[d]
            touched.append(pod.node_name)
        return touched

    def put_back(self, pods: Sequence[PodInfo]) -> bool:
        """Return `pods` to their nodes if the gang stays placeable; else leave them out."""
        touched = self._shift(pods, -1)
        if all(self._holds(n) for n in touched):
            return True
        placement = self.packer.place(self.active, self.free)
        if placement is not None:
            self._witness(placement)
            return True
        self._shift(pods, +1)
        return False

    def take_again(self, pods: Sequence[PodInfo]) -> None:
        self._shift(pods, +1)  # more room: the witness still holds

    def _holds(self, node: str) -> bool:
        used = self.used.get(node)
        return used is None or all(u <= f for u, f in zip(used, self.free[node], strict=True))

    def prune(self) -> None:
        """Forget nodes that cannot host any member: from here on their space only shrinks."""
        keep = [n for n in self.active if n in self.used or self.packer.can_host_any(n, self.free[n])]
        if len(keep) != len(self.active):
            self.active, self.active_set = keep, set(keep)


def run_reprieve(reprieve: Reprieve, order: Iterable[Unit]) -> list[Taken]:
    """Put units back in `order`; what cannot come back is taken."""
    taken: list[Taken] = []
    for unit in order:
        if reprieve.put_back(unit.pods):
            continue
        if unit.surplus > 0:
            back, lost = [], []
            for pod in unit.pods:
                (back if reprieve.put_back((pod,)) else lost).append(pod)
            if len(lost) <= unit.surplus:
                taken.append(Taken(unit, tuple(lost), whole=False))
                reprieve.prune()
                continue
            reprieve.take_again(back)
        taken.append(Taken(unit, unit.pods, whole=True))
        reprieve.prune()
    return taken
