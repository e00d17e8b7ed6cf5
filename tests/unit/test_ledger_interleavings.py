"""PodGroup claims on one namespace's ledger, interleaved every way hypothesis finds: a
RuleBasedStateMachine over the pure claim turn (priogate.ledger.claim.decide) run by real
LedgerStores against the in-memory API server (tests/fake_api.py).

The world: one namespace with one ResourceQuota (hard cpu 10, pods 4; each group has
minMember 1, so it claims one pod), three webhook replicas, each a LedgerStore with its own
watch cache of the stored PodGroups, which lags until a step lets it catch up, and one clock,
moved only by steps. An admitted request is "pending": kube-apiserver may store it until the
in-flight bound has passed since the decision that admitted it (timing.IN_FLIGHT: by then it
has given up on it), or never (a later admission step refused it, or it was a forged review
sent straight to the webhook).

Steps: creates and updates (growing or shrinking) on any replica, the same name created
twice, a replica's whole turn taken between another's decision and its write (that write
meets 409 and is decided again, possibly seconds later), a ledger write lost before or after
it is stored (the admission fails closed), caches catching up, deletes held by a finalizer and
the finalizer's removal, the ledger deleted while nothing is in flight (it is rebuilt from a
quorum LIST), and the clock moving (0.1 to 10 s, either side of the 5 s in-flight bound).

Checked after every step:
- nothing is over-admitted: the stored groups (finalizer-held ones included) plus every pending
  admission (counted at the larger of its claim and the stored one) fit under the quota;
- no live reservation is lost: every stored group and every pending admission has an entry in
  the ledger as stored that covers its claim (or, when the ledger does not exist, nothing is in
  flight, so the rebuild from a quorum LIST holds every live claim); together with the ledger's
  entries fitting under the quota (the invariant of docs/ledger.md), this is why the first
  check holds whatever happens next.

In CI: 300 examples of up to 50 steps each (15,000 steps at most), derandomized, no database.
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.control import event as hypothesis_event
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from priogate.kube.ledger_store import LedgerBusy, LedgerStore
from priogate.ledger import claim
from priogate.ledger.claim import Claim
from priogate.ledger.codec import ledger_of, ledger_path
from priogate.ledger.model import Entry, Ledger, Reads, stamp
from priogate.ledger.outcome import Awaiting, Outcome
from priogate.ledger.stored_groups import entry_of_group, listing_of
from priogate.ledger.timing import IN_FLIGHT
from priogate.ledger.totals import EntryTotals
from priogate.resources import parse_resource_list
from tests.builders import podgroup, resource_quota
from tests.fake_api import FakeApi
from tests.unit.ledger_world import GROUPS, LEDGER, NS, QUOTAS

HARD = {"cpu": 10, "pods": 4}
QUOTA = f"{QUOTAS}/compute"
LEDGERS = ledger_path("priogate-system")
START = dt.datetime(2026, 11, 28, 6, 0, tzinfo=dt.UTC)
EVER = stamp(dt.datetime.min.replace(tzinfo=dt.UTC))  # as webhook.view stamps cached groups
REPLICAS = 3

replicas = st.integers(0, REPLICAS - 1)
names = st.sampled_from("abc")  # few names: the same name is created twice now and then
cpus = st.integers(1, 6)
picks = st.integers(min_value=0)  # which pending admission, modulo how many there are


class RacingApi(FakeApi):
    """FakeApi that can do something just before the next write of a ledger: run another
    replica's whole turn (so the write meets 409), or lose the connection before the write
    reaches storage or after it is stored."""

    def __init__(self) -> None:
        super().__init__()
        self.before_ledger_write: Any = None
        self.fault: str | None = None

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        if method not in ("PUT", "POST") or not path.startswith(LEDGERS):
            return super().request(method, path, **kw)
        hook, self.before_ledger_write = self.before_ledger_write, None
        if hook is not None:
            hook()
        fault, self.fault = self.fault, None
        if fault is not None:
            event(f"a ledger write {fault}")
        if fault == "lost":
            raise ConnectionError("connection reset before the write was stored")
        stored = super().request(method, path, **kw)
        if fault == "unanswered":
            raise ConnectionError("connection reset after the write was stored")
        return stored


@dataclass
class Replica:
    store: LedgerStore
    totals: EntryTotals = field(default_factory=EntryTotals)  # one per process, as in the webhook
    cache: list[dict[str, Any]] = field(default_factory=list)  # stored groups, as last seen


@dataclass
class Pending:
    """An admitted request kube-apiserver has not stored yet."""

    obj: dict[str, Any]  # what it would store
    decided: dt.datetime  # when priogate made the decision that admitted it


def event(what: str) -> None:
    """Counted in --hypothesis-show-statistics; nothing when a test drives the machine by hand."""
    if currently_in_test_context():
        hypothesis_event(what)


def conflicted() -> None:
    event("a ledger write met 409")


def demand(entry: Entry) -> dict[str, Fraction]:
    """What a claim counts against the quota (minMember counts as pods)."""
    return {"cpu": parse_resource_list(entry.min_resources)["cpu"], "pods": Fraction(entry.min_member)}


def claim_of(obj: dict[str, Any]) -> Entry:
    return entry_of_group(obj, EVER)


class Interleavings(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = START
        self.api = RacingApi()
        hard = {name: str(amount) for name, amount in HARD.items()}
        self.api.put_object(QUOTAS, resource_quota("compute", hard=hard, namespace=NS))
        self.replicas = [
            # Time here is the injected clock's: the store's real-time limits (its deadline, a late
            # write answered "retry") are set out of reach, so a loaded machine cannot change a turn.
            Replica(
                LedgerStore(
                    self.api,
                    clock=self.clock,
                    on_conflict=conflicted,
                    writer=f"replica-{i}",
                    deadline_seconds=600,
                    late_write_seconds=600,
                )
            )
            for i in range(REPLICAS)
        ]
        self.pending: list[Pending] = []
        self.uids = itertools.count(1)

    def clock(self) -> dt.datetime:
        return self.now

    # --- the world -------------------------------------------------------------------------

    def stored(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(obj) for path, obj in self.api.objects.items() if path.startswith(f"{GROUPS}/")]

    def live_pending(self) -> list[Pending]:
        """Admissions kube-apiserver may still store (it times out after the bound)."""
        return [p for p in self.pending if self.now - p.decided <= IN_FLIGHT]

    def turn(self, r: int, obj: dict[str, Any], previous: Entry | None) -> Outcome:
        """One admission on replica `r`, on what its caches show, as webhook.rules.podgroup_quota
        takes it; a turn that fails (lost connection, busy) is a refusal, as the webhook answers."""
        replica = self.replicas[r]
        ask = Claim(
            namespace=NS,
            entry=entry_of_group(obj, stamp(self.now)),
            previous=previous,
            live={g["metadata"]["uid"]: bool(g["metadata"].get("deletionTimestamp")) for g in replica.cache},
            stored=listing_of(replica.cache, dt.datetime.min.replace(tzinfo=dt.UTC)).groups,
            quotas=[self.api.objects[QUOTA]],
            bound=IN_FLIGHT,
            totals=replica.totals,
            asked_at=self.now,
        )
        decided: list[dt.datetime] = []  # when each decision of the turn was made (409: again)

        def decide(ledger: Ledger, reads: Reads) -> tuple[Ledger | None, Outcome]:
            decided.append(self.now)
            return claim.decide(ledger, reads, self.clock, ask)

        try:
            outcome = replica.store.update(NS, decide)
        except (LedgerBusy, ConnectionError) as e:
            outcome = f"failed: {e}"
        if outcome is None:
            # The in-flight bound runs from the decision that was written (timing.IN_FLIGHT),
            # not from when the request arrived, whatever the ledger's stamp says.
            self.pending.append(Pending(obj, decided[-1]))
        kind = "admitted" if outcome is None else "awaiting" if isinstance(outcome, Awaiting) else "refused"
        event(f"{'update' if previous else 'create'} {kind}")
        return outcome

    def new_group(self, name: str, cpu: int) -> dict[str, Any]:
        obj = podgroup(
            name, namespace=NS, uid=f"uid-{next(self.uids)}", min_member=1, min_resources={"cpu": str(cpu)}
        )
        obj["metadata"]["generation"] = 1  # set before admission, as for any custom resource
        return obj

    # --- requests --------------------------------------------------------------------------

    @rule(r=replicas, name=names, cpu=cpus)
    def create(self, r: int, name: str, cpu: int) -> None:
        self.turn(r, self.new_group(name, cpu), None)

    @rule(r=replicas, name=names, cpu=cpus)
    def update(self, r: int, name: str, cpu: int) -> None:
        """minResources changed on a stored group (growing or shrinking)."""
        old = self.api.objects.get(f"{GROUPS}/{name}")
        if old is None or old["metadata"].get("deletionTimestamp"):
            return
        obj = copy.deepcopy(old)
        obj["spec"]["minResources"] = {"cpu": str(cpu)}
        obj["metadata"]["generation"] += 1
        self.turn(r, obj, claim_of(old))

    @rule(
        first=replicas,
        other=st.integers(1, REPLICAS - 1),
        names=st.tuples(names, names),
        cpus=st.tuples(cpus, cpus),
        took=st.integers(0, 3000),
    )
    def race(self, first: int, other: int, names: tuple[str, str], cpus: tuple[int, int], took: int) -> None:
        """Replica `first` decides a create; before its write lands, another replica takes a
        whole turn, `took` ms long: if that turn wrote, `first`'s write meets 409 and it decides
        again, later."""
        second = (first + other) % REPLICAS
        rival = self.new_group(names[1], cpus[1])

        def meanwhile() -> None:
            self.turn(second, rival, None)
            self.now += dt.timedelta(milliseconds=took)

        self.api.before_ledger_write = meanwhile
        self.turn(first, self.new_group(names[0], cpus[0]), None)
        self.api.before_ledger_write = None  # unused when the first turn wrote nothing

    @rule(kind=st.sampled_from(["lost", "unanswered"]))
    def lose_next_ledger_write(self, kind: str) -> None:
        """A crashed turn: the connection drops before or after the next ledger write is stored."""
        self.api.fault = kind

    # --- kube-apiserver and the clients ----------------------------------------------------

    @precondition(lambda self: self.live_pending())
    @rule(i=picks)
    def store_pending(self, i: int) -> None:
        """kube-apiserver stores an admitted request (an update only onto the object it was
        made from, a create only under a free name; otherwise storage refuses it)."""
        live = self.live_pending()
        p = live[i % len(live)]
        self.pending.remove(p)
        meta = p.obj["metadata"]
        current = self.api.objects.get(f"{GROUPS}/{meta['name']}")
        if meta["generation"] == 1 and current is None:
            meta.pop("resourceVersion", None)
            self.api.put_object(GROUPS, p.obj)
        elif current is not None and current["metadata"].get("resourceVersion") == meta.get(
            "resourceVersion"
        ):
            self.api.put_object(GROUPS, p.obj)

    @precondition(lambda self: self.pending)
    @rule(i=picks)
    def never_stored(self, i: int) -> None:
        """A later admission step refuses it, or it was a forged review: never stored."""
        self.pending.pop(i % len(self.pending))

    @rule(name=names, held=st.booleans())
    def delete(self, name: str, held: bool) -> None:
        """A group deleted; `held`: by a finalizer, so it stays stored (and reserves) for now."""
        obj = self.api.objects.get(f"{GROUPS}/{name}")
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        if not held:
            self.api.remove(f"{GROUPS}/{name}")
            return
        obj = copy.deepcopy(obj)
        obj["metadata"]["deletionTimestamp"] = stamp(self.now)
        obj["metadata"]["finalizers"] = ["example.com/cleanup"]
        self.api.put_object(GROUPS, obj)

    @rule(name=names)
    def remove_finalizer(self, name: str) -> None:
        obj = self.api.objects.get(f"{GROUPS}/{name}")
        if obj is not None and obj["metadata"].get("deletionTimestamp"):
            self.api.remove(f"{GROUPS}/{name}")

    @rule(r=replicas)
    def cache_catches_up(self, r: int) -> None:
        self.replicas[r].cache = self.stored()

    @rule(ms=st.sampled_from([100, 1000, 2500, 4000, 6000, 10_000]))
    def advance_clock(self, ms: int) -> None:
        self.now += dt.timedelta(milliseconds=ms)
        self.pending = self.live_pending()  # the rest timed out in kube-apiserver

    @precondition(lambda self: LEDGER in self.api.objects and not self.live_pending())
    @rule()
    def ledger_deleted(self) -> None:
        """Deleted by hand while nothing is in flight: the next turn rebuilds it from a LIST."""
        self.api.remove(LEDGER)

    # --- what must hold after every step ---------------------------------------------------

    @invariant()
    def nothing_over_admitted(self) -> None:
        most: dict[str, dict[str, Fraction]] = {}  # uid -> the most its group may come to hold
        for obj in self.stored() + [p.obj for p in self.live_pending()]:
            held = most.setdefault(obj["metadata"]["uid"], {})
            for name, amount in demand(claim_of(obj)).items():
                held[name] = max(held.get(name, Fraction(0)), amount)
        for name, hard in HARD.items():
            total = sum(held[name] for held in most.values())
            assert total <= hard, f"over-admitted: {name} {total} > {hard} ({most})"

    @invariant()
    def no_live_reservation_lost(self) -> None:
        live = self.stored() + [p.obj for p in self.live_pending()]
        ledger = self.api.objects.get(LEDGER)
        if ledger is None:
            assert not self.live_pending(), "the ledger is missing while admissions are in flight"
            return
        entries = ledger_of(ledger).entries
        for obj in live:
            entry = entries.get(obj["metadata"]["uid"])
            assert entry is not None and entry.covers(claim_of(obj)), (
                f"{obj['metadata']['name']} ({obj['metadata']['uid']}) holds "
                f"{dict(obj['spec']['minResources'])} but the ledger has {entry}"
            )
        for name, hard in HARD.items():
            total = sum(demand(e)[name] for e in entries.values())
            assert total <= hard, f"the ledger holds {name} {total} > {hard}"


TestLedgerInterleavings = Interleavings.TestCase
TestLedgerInterleavings.settings = settings(
    max_examples=300,
    stateful_step_count=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_an_update_covered_by_one_in_flight_keeps_its_own_bound():
    """What the machine found: a growing update admitted while a larger one was in flight wrote
    nothing, so its claim counted only until the earlier one's bound; a LIST after that settled
    the entry to the stored object, and the room the update may still take was given away."""
    m = Interleavings()
    m.create(r=0, name="a", cpu=2)
    m.store_pending(0)
    m.update(r=0, name="a", cpu=6)  # in flight
    m.advance_clock(3000)
    m.update(r=1, name="a", cpu=5)  # covered by the one in flight
    m.advance_clock(3000)  # past the first update's bound, not the second's
    m.create(r=2, name="b", cpu=6)  # fits only if "a" holds 2
    m.no_live_reservation_lost()
    m.nothing_over_admitted()
    m.store_pending(0)  # the second update, within its bound
    m.nothing_over_admitted()
