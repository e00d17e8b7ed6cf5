"""Can a gang's members all be placed at once? An exact answer, with a placement to show.

Members come in classes of identical request and identical node eligibility. One class is
a counting problem (sum over nodes of how many fit). Several classes need a search: a
depth-first assignment, largest members first, where identical members take nodes in
non-decreasing order and nodes with identical free space and eligibility are tried once.
A search that exceeds its step budget answers "no" (and says so): preemption then keeps a
victim it might have spared, which is safe, never the other way round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Free = list[int]  # free amount per gang dimension, in the gang's own dimension order
SEARCH_BUDGET = 200_000
DEEP_GANG = 400  # beyond this many members of mixed shapes, first-fit only (no recursion)


@dataclass(frozen=True)
class MemberClass:
    vector: tuple[int, ...]  # per gang dimension
    members: tuple[str, ...]  # pod keys, placed in this order
    nodes: frozenset[str]  # nodes whose static filters admit this class

    def capacity(self, free: Sequence[int]) -> int:
        """How many members of this class fit into `free`."""
        most = None
        for amount, room in zip(self.vector, free, strict=True):
            if amount > 0:
                count = room // amount if room >= 0 else -1
                most = count if most is None or count < most else most
        return max(most if most is not None else 0, 0)


class Packer:
    """Places the members of `classes` onto `nodes` given per-node free space."""

    def __init__(self, classes: Sequence[MemberClass]) -> None:
        # Largest first: the hardest members are placed while there is most choice.
        self.classes = sorted(classes, key=lambda c: (-sum(c.vector), c.members))
        self.total = sum(len(c.members) for c in self.classes)
        self.exhausted = False  # a search ran out of budget at least once

    def can_host_any(self, node: str, free: Sequence[int]) -> bool:
        return any(node in c.nodes and c.capacity(free) > 0 for c in self.classes)

    def place(self, nodes: Sequence[str], free: Mapping[str, Free]) -> dict[str, str] | None:
        """member -> node for every member, or None when (as far as the budget allows) the
        members cannot all be placed."""
        if len(self.classes) == 1:
            return self._place_one_class(self.classes[0], nodes, free)
        if not self._counts_allow(nodes, free):
            return None
        if self.total > DEEP_GANG:
            return self._first_fit(nodes, free)
        return self._search(nodes, free)

    @staticmethod
    def _place_one_class(
        cls: MemberClass, nodes: Sequence[str], free: Mapping[str, Free]
    ) -> dict[str, str] | None:
        placement: dict[str, str] = {}
        members = iter(cls.members)
        left = len(cls.members)
        for node in nodes:
            if node not in cls.nodes:
                continue
            for _ in range(min(cls.capacity(free[node]), left)):
                placement[next(members)] = node
                left -= 1
            if left == 0:
                return placement
        return None

    def _counts_allow(self, nodes: Sequence[str], free: Mapping[str, Free]) -> bool:
        """Necessary conditions: each class alone fits by count, and the summed requests fit
        the summed free space of the nodes some member may use."""
        for cls in self.classes:
            if sum(cls.capacity(free[n]) for n in nodes if n in cls.nodes) < len(cls.members):
                return False
        usable = [n for n in nodes if any(n in c.nodes for c in self.classes)]
        for d in range(len(self.classes[0].vector)):
            wanted = sum(c.vector[d] * len(c.members) for c in self.classes)
            if wanted > sum(max(free[n][d], 0) for n in usable):
                return False
        return True

    def _search(self, nodes: Sequence[str], free: Mapping[str, Free]) -> dict[str, str] | None:
        order = [(ci, key) for ci, cls in enumerate(self.classes) for key in cls.members]
        residual = {n: list(free[n]) for n in nodes}
        masks = {n: tuple(n in c.nodes for c in self.classes) for n in nodes}
        chosen: list[int] = [0] * len(order)
        steps = 0

        def assign(i: int) -> bool:
            nonlocal steps
            if i == len(order):
                return True
            ci = order[i][0]
            cls = self.classes[ci]
            first = chosen[i - 1] if i and order[i - 1][0] == ci else 0
            tried: set[tuple] = set()
            for index in range(first, len(nodes)):
                node = nodes[index]
                room = residual[node]
                if node not in cls.nodes or any(a > r for a, r in zip(cls.vector, room, strict=True)):
                    continue
                shape = (tuple(room), masks[node])
                if shape in tried:
                    continue  # an interchangeable node was already tried at this depth
                tried.add(shape)
                steps += 1
                if steps > SEARCH_BUDGET:
                    self.exhausted = True
                    return False
                for d, a in enumerate(cls.vector):
                    room[d] -= a
                chosen[i] = index
                if assign(i + 1):
                    return True
                for d, a in enumerate(cls.vector):
                    room[d] += a
                if self.exhausted:
                    return False
            return False

        if not assign(0):
            return None
        return {key: nodes[chosen[i]] for i, (_, key) in enumerate(order)}

    def _first_fit(self, nodes: Sequence[str], free: Mapping[str, Free]) -> dict[str, str] | None:
        residual = {n: list(free[n]) for n in nodes}
        placement: dict[str, str] = {}
        for cls in self.classes:
            for key in cls.members:
                for node in nodes:
                    room = residual[node]
                    if node in cls.nodes and all(a <= r for a, r in zip(cls.vector, room, strict=True)):
                        for d, a in enumerate(cls.vector):
                            room[d] -= a
                        placement[key] = node
                        break
                else:
                    self.exhausted = True  # not proven impossible, only not found
                    return None
        return placement
