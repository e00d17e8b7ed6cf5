"""The controller's backstop for the enrolment label (controller/enrol.py): a namespace that holds
a reservation but lacks the label is labelled; one that reserves nothing, or is labelled, or is
gone, is left alone."""

from __future__ import annotations

from typing import Any

import pytest

from controller.caches import Caches
from controller.enrol import Enroller
from priogate.kube.cache import WatchCache
from priogate.kube.client import ApiError
from priogate.ledger.codec import ledger_object
from priogate.ledger.model import Entry, Ledger
from priogate.scope import ENROLLED_LABEL, claim_of, needs_enrolment, reserves
from tests.builders import podgroup

LONG_AGO = "2026-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("min_resources", "min_member", "want"),
    [
        ({}, 0, False),
        ({"cpu": "0"}, 0, False),
        ({"cpu": "0", "memory": "1Gi"}, 0, True),
        ({"cpu": "-1"}, 0, False),
        ({"cpu": "10m"}, 0, True),
        ({"cpu": "bogus"}, 0, True),
        # A group claims its minMember as pods, whatever its minResources.
        ({}, 1, True),
        ({"cpu": "0"}, 6, True),
    ],
)
def test_reserves(min_resources, min_member, want):
    assert reserves(min_resources, min_member) is want


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ({}, ({}, 1)),
        ({"minMember": 0}, ({}, 0)),
        ({"minMember": 3, "minResources": {"cpu": "1"}}, ({"cpu": "1"}, 3)),
        ({"minMember": "3", "minResources": "x"}, ({}, 1)),
    ],
)
def test_claim_of(spec, want):
    assert claim_of(spec) == want


@pytest.mark.parametrize(
    ("labels", "claims", "want"),
    [
        (None, [({"cpu": "1"}, 0)], True),
        ({ENROLLED_LABEL: "false"}, [({"cpu": "1"}, 0)], True),
        ({ENROLLED_LABEL: "true"}, [({"cpu": "1"}, 0)], False),
        (None, [], False),
        (None, [({}, 0), ({"cpu": "0"}, 0)], False),
        (None, [({}, 0), ({}, 2)], True),
    ],
)
def test_needs_enrolment(labels, claims, want):
    assert needs_enrolment(labels, claims) is want


class Patches:
    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.paths: list[str] = []

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        assert method == "PATCH" and kw["body"] == {"metadata": {"labels": {ENROLLED_LABEL: "true"}}}
        self.paths.append(path)
        if self.status != 200:
            raise ApiError(self.status, "x", "scripted")
        return {}


def enroller(
    labels: dict[str, str] | None,
    groups: list[dict[str, Any]] = (),
    entries: dict[str, Entry] | None = None,
    *,
    namespace_known: bool = True,
    status: int = 200,
) -> tuple[Enroller, Patches]:
    ns = {"metadata": {"name": "team-a", **({"labels": labels} if labels is not None else {})}}
    ledgers = (
        [ledger_object("priogate-system", "team-a", Ledger(entries), "1")] if entries is not None else []
    )
    caches = Caches(
        podgroups=WatchCache.static("podgroups", list(groups)),
        pods=WatchCache.static("pods", []),
        quotas=WatchCache.static("quotas", []),
        nodes=WatchCache.static("nodes", []),
        ledgers=WatchCache.static("ledgers", ledgers),
        pdbs=WatchCache.static("pdbs", []),
        classes=WatchCache.static("classes", []),
        namespaces=WatchCache.static("namespaces", [ns] if namespace_known else []),
    )
    client = Patches(status)
    return Enroller(client, caches, "priogate-system"), client  # type: ignore[arg-type]


RESERVING = podgroup("g", namespace="team-a", min_resources={"cpu": "2"})
EMPTY = podgroup("e", namespace="team-a", min_member=0)
MEMBERS_ONLY = podgroup("m", namespace="team-a")  # claims its default minMember (1 pod)
ENTRY = {"uid-r": Entry("r", "uid-r", {"cpu": "4"}, 1, "", LONG_AGO)}


@pytest.mark.parametrize(
    ("labels", "groups", "entries", "known", "enrolled"),
    [
        (None, [RESERVING], None, True, True),  # stored before enrolment existed
        ({"team": "a"}, [], ENTRY, True, True),  # the ledger's entry alone (group not cached yet)
        ({ENROLLED_LABEL: "true"}, [RESERVING], ENTRY, True, False),
        (None, [EMPTY], {}, True, False),  # reserves nothing: stays off the quota hooks
        (None, [MEMBERS_ONLY], {}, True, True),  # no minResources, but a pod a quota may limit
        (None, [RESERVING], None, False, False),  # not in the cache: its event comes later
    ],
    ids=["stored-group", "ledger-entry", "already", "nothing-reserved", "members-only", "unknown"],
)
def test_a_reserving_namespace_without_the_label_is_labelled(labels, groups, entries, known, enrolled):
    e, client = enroller(labels, groups, entries, namespace_known=known)
    assert e.enrol("team-a") is enrolled
    assert client.paths == (["/api/v1/namespaces/team-a"] if enrolled else [])


def test_a_namespace_deleted_meanwhile_is_not_an_error_and_a_refusal_is():
    gone, _ = enroller(None, [RESERVING], status=404)
    assert gone.enrol("team-a") is False
    forbidden, _ = enroller(None, [RESERVING], status=403)
    with pytest.raises(ApiError):
        forbidden.enrol("team-a")
