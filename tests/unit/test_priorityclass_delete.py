"""Safe PriorityClass deletes and the globalDefault warning, in the PriorityClass hook
(webhook/rules/priorityclasses.py) over the paginated LISTs of priogate/kube/class_users.py,
against a stub API server: refusals name the users and count them, the force annotation skips
the check, kinds not served are skipped, and a listing that cannot finish refuses with "retry"
(503) in time, never a 500."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pytest

from priogate.class_users import FORCE_DELETE_ANNOTATION, KINDS, NAMESPACE_DEFAULT_ANNOTATION
from priogate.kube.class_users import PAGE_SIZE, ListingFailed, class_uses, list_namespaces
from priogate.kube.client import ApiClient, ApiError, resource_path
from tests.builders import SYSTEM_CLASSES, podgroup, priority_class, workload
from tests.reviews import make_view, review
from webhook.endpoints import answer_review
from webhook.review import Decision, parse_review
from webhook.rules import priorityclasses

PATH = {k.label: resource_path(k.group_version, k.plural) for k in KINDS}
NAMESPACES = resource_path("v1", "namespaces")


class StubApi(ApiClient):
    """LISTs of fixed collections, `page` items a page with continue tokens, as kube-apiserver
    paginates; a path it does not hold answers 404 (not served), but namespaces are always
    served (none unless given). A collection given as an exception raises it; `slow` paths sleep
    that long first."""

    def __init__(
        self,
        collections: Mapping[str, Sequence[Any] | Exception],
        *,
        page: int = 2,
        slow: Mapping[str, float] | None = None,
    ) -> None:
        self.collections = {NAMESPACES: [], **collections}
        self.page = page
        self.slow = slow or {}
        self.calls: list[tuple[str, tuple[tuple[str, str], ...]]] = []

    def get(self, path: str, *, query: Sequence[tuple[str, str]] = (), **_: Any) -> dict[str, Any]:
        self.calls.append((path, tuple(query)))
        time.sleep(self.slow.get(path, 0))
        items = self.collections.get(path)
        if items is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if isinstance(items, Exception):
            raise items
        start = int(dict(query).get("continue", "0"))
        end = start + self.page
        meta = {"continue": str(end)} if end < len(items) else {}
        return {"items": list(items[start:end]), "metadata": meta}


GOLD = priority_class("gold", value=100)


def admit(
    obj: dict | None,
    api: ApiClient | None,
    *,
    operation: str = "DELETE",
    old: dict | None = None,
    classes: Sequence[dict] = (GOLD,),
    within: float | None = 10.0,
) -> Decision:
    if operation == "DELETE" and old is None:
        old = obj
        obj = None
    body = review(obj, operation=operation, old=old, resource="priorityclasses")
    view = make_view(classes)
    view.client = api
    deadline = None if within is None else time.monotonic() + within
    return priorityclasses.admit(parse_review(orjson.dumps(body), deadline), view)


def forced_class(name: str = "gold", value: str = "true") -> dict[str, Any]:
    pc = priority_class(name, value=100)
    pc["metadata"]["annotations"] = {FORCE_DELETE_ANNOTATION: value}
    return pc


def test_a_class_a_deployment_names_is_not_deleted():
    api = StubApi(
        {PATH["Deployment"]: [workload("Deployment", "web", namespace="team-a", priority_class="gold")]}
    )
    decision = admit(GOLD, api)
    assert not decision.allowed and decision.code == 403
    assert decision.message == (
        'priorityclasses.scheduling.k8s.io "gold" is forbidden: it is still named by 1 live object:'
        ' Deployment "team-a/web"; their next pods would be refused once the class is gone. Change or'
        ' delete them first, or annotate the class priogate.io/force-delete="true" to delete it anyway'
    )


def native_group(name: str, priority_class: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"priorityClassName": priority_class}}


@pytest.mark.parametrize(
    ("kind", "obj"),
    [
        *[(k, workload(k, "w", namespace="ns", priority_class="gold")) for k in PATH if "." not in k],
        ("PodGroup.scheduling.volcano.sh", podgroup("w", namespace="ns", priority_class="gold")),
        ("PodGroup.scheduling.k8s.io", native_group("w", "gold")),
    ],
)
def test_each_kind_blocks_the_delete(kind, obj):
    decision = admit(GOLD, StubApi({PATH[kind]: [obj]}))
    assert not decision.allowed
    assert f'{kind} "ns/w"' in decision.message


def test_an_unused_class_is_deleted_after_every_kind_is_listed_in_pages():
    others = [workload("Deployment", f"d{i}", priority_class="silver") for i in range(5)]
    api = StubApi({PATH["Deployment"]: others, PATH["Job"]: []})
    assert admit(GOLD, api).allowed
    listed = {path for path, _ in api.calls}
    assert listed == {*PATH.values(), NAMESPACES}
    deployment_calls = [q for p, q in api.calls if p == PATH["Deployment"]]
    assert [dict(q).get("continue") for q in deployment_calls] == [None, "2", "4"]
    assert all(dict(q)["limit"] == str(PAGE_SIZE) for q in deployment_calls)


def test_every_user_counts_and_five_are_named():
    deployments = [workload("Deployment", f"d{i}", namespace="ns", priority_class="gold") for i in range(7)]
    groups = [podgroup(f"g{i}", namespace="ns", priority_class="gold") for i in range(2)]
    api = StubApi({PATH["Deployment"]: deployments, PATH["PodGroup.scheduling.volcano.sh"]: groups})
    decision = admit(GOLD, api)
    assert "still named by 9 live objects: " in decision.message
    assert decision.message.count('"ns/') == 5
    assert " and 4 more;" in decision.message


def test_objects_being_deleted_and_finished_jobs_do_not_block():
    api = StubApi(
        {
            PATH["Deployment"]: [workload("Deployment", "d", priority_class="gold", deleting=True)],
            PATH["Job"]: [workload("Job", "j", priority_class="gold", finished="Complete")],
        }
    )
    assert admit(GOLD, api).allowed


def test_objects_in_a_namespace_being_deleted_do_not_block():
    gone = {
        "metadata": {"name": "old", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"phase": "Terminating"},
    }
    api = StubApi(
        {
            NAMESPACES: [ns("kept"), gone],
            PATH["Deployment"]: [
                workload("Deployment", "a", namespace="old", priority_class="gold"),
                workload("Deployment", "b", namespace="kept", priority_class="gold"),
            ],
        }
    )
    decision = admit(GOLD, api)
    assert 'still named by 1 live object: Deployment "kept/b"' in decision.message
    api.collections[PATH["Deployment"]] = api.collections[PATH["Deployment"]][:1]
    assert admit(GOLD, api).allowed


def test_a_deployments_replicasets_are_not_named_twice():
    api = StubApi(
        {
            PATH["Deployment"]: [workload("Deployment", "web", priority_class="gold", uid="d1")],
            PATH["ReplicaSet"]: [
                workload("ReplicaSet", "web-5f", priority_class="gold", controller_uid="d1")
            ],
        }
    )
    decision = admit(GOLD, api)
    assert "still named by 1 live object: Deployment" in decision.message
    assert "ReplicaSet" not in decision.message


def test_the_force_annotation_deletes_without_listing():
    api = StubApi({PATH["Deployment"]: [workload("Deployment", "web", priority_class="gold")]})
    decision = admit(forced_class(), api)
    assert decision.allowed and api.calls == []
    assert any(FORCE_DELETE_ANNOTATION in w for w in decision.warnings)


def test_another_annotation_value_does_not_force():
    api = StubApi({PATH["Deployment"]: [workload("Deployment", "web", priority_class="gold")]})
    assert not admit(forced_class(value="yes"), api).allowed


def test_without_an_old_object_the_cached_class_says_whether_it_is_forced():
    api = StubApi({PATH["Deployment"]: [workload("Deployment", "web", priority_class="gold")]})
    body = review(None, operation="DELETE", resource="priorityclasses")
    body["request"]["name"] = "gold"
    view = make_view([forced_class()])
    view.client = api
    assert priorityclasses.admit(parse_review(orjson.dumps(body)), view).allowed
    view = make_view([GOLD])
    view.client = api
    assert not priorityclasses.admit(parse_review(orjson.dumps(body)), view).allowed


@pytest.mark.parametrize(
    "error",
    [
        ApiError(403, "Forbidden", 'deployments.apps is forbidden: User "x" cannot list resource'),
        ApiError(500, "InternalError", "etcd is down"),
        ApiError(410, "Expired", "the provided continue parameter is too old"),
        OSError("connection refused"),
        ValueError("body is not JSON"),
    ],
)
def test_a_listing_that_fails_refuses_with_retry(error):
    decision = admit(GOLD, StubApi({PATH["Deployment"]: error}))
    assert not decision.allowed and decision.code == 503 and decision.reason == "ServiceUnavailable"
    assert decision.message.startswith(
        'priorityclasses.scheduling.k8s.io "gold" could not be deleted: could not check which'
        " workloads and PodGroups still name it (/apis/apps/v1/deployments: "
    )
    assert decision.message.endswith(
        '; retry, or annotate the class priogate.io/force-delete="true" to delete it anyway'
    )


def test_namespaces_that_cannot_be_listed_refuse_the_delete():
    decision = admit(GOLD, StubApi({NAMESPACES: ApiError(500, "InternalError", "etcd is down")}))
    assert decision.code == 503 and "/api/v1/namespaces: 500 InternalError" in decision.message


def test_a_slow_listing_refuses_before_kube_apiserver_stops_waiting():
    api = StubApi({PATH["StatefulSet"]: []}, slow={PATH["StatefulSet"]: 2.0})
    started = time.monotonic()
    decision = admit(GOLD, api, within=1.5)  # listing must end ANSWER_MARGIN_SECONDS before
    assert time.monotonic() - started < 1.0
    assert (
        decision.code == 503
        and "statefulsets.apps/v1: not listed within the admission's time" in decision.message
    )


def test_a_deadline_already_passed_refuses_and_never_errs():
    assert admit(GOLD, StubApi({}), within=0.5).code == 503


def test_the_answer_through_the_endpoint_is_a_refusal_not_a_500():
    body = review(None, operation="DELETE", old=GOLD, resource="priorityclasses")
    view = make_view([GOLD])
    view.client = StubApi({PATH["Deployment"]: RuntimeError("a bug in the client")})
    (_, _, data), operation, label = answer_review(priorityclasses.RULE_SET, view, orjson.dumps(body))
    status = orjson.loads(data)["response"]["status"]
    assert (operation, label, status["code"]) == ("DELETE", "error", 503)


def test_without_an_api_server_nothing_is_listed():
    assert admit(GOLD, None).allowed


def test_system_classes_are_refused_before_any_listing():
    api = StubApi({})
    decision = admit(SYSTEM_CLASSES[0], api, classes=SYSTEM_CLASSES)
    assert not decision.allowed and "system" in decision.message and api.calls == []


def test_deleting_the_global_default_still_warns():
    default = priority_class("gold", value=100, default=True)
    decision = admit(default, StubApi({}), classes=[default])
    assert decision.allowed
    assert decision.warnings == ["the globalDefault class is deleted: class-less pods will get priority 0"]


def ns(name: str, default: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if default:
        meta["annotations"] = {NAMESPACE_DEFAULT_ANNOTATION: default}
    return {"metadata": meta, "status": {"phase": "Active"}}


def test_a_new_global_default_warns_how_many_namespaces_it_changes():
    api = StubApi({NAMESPACES: [ns("a"), ns("b"), ns("c", "silver")]})
    new = priority_class("gold", value=100, default=True)
    decision = admit(new, api, operation="CREATE", classes=[])
    assert decision.allowed
    assert decision.warnings == [
        "pods created without a priorityClassName in 2 namespaces (not in 1 more with their own"
        f" {NAMESPACE_DEFAULT_ANNOTATION}) will now get priority 100 from this class;"
        " existing pods keep theirs"
    ]


def test_an_update_that_makes_the_default_warns_too():
    api = StubApi({NAMESPACES: [ns("a")]})
    new = priority_class("gold", value=100, default=True)
    decision = admit(new, api, operation="UPDATE", old=GOLD, classes=[GOLD])
    assert decision.allowed and "in 1 namespace will now get priority 100" in decision.warnings[0]


def test_namespaces_that_cannot_be_listed_leave_the_warning_uncounted():
    api = StubApi({NAMESPACES: ApiError(403, "Forbidden", "cannot list namespaces")})
    decision = admit(priority_class("gold", value=5, default=True), api, operation="CREATE", classes=[])
    assert (
        decision.allowed and "in every namespace (they could not be counted just now)" in decision.warnings[0]
    )


def test_a_class_that_is_not_the_default_lists_nothing():
    api = StubApi({NAMESPACES: [ns("a")]})
    assert admit(GOLD, api, operation="CREATE", classes=[]).warnings == [] and api.calls == []


def test_listing_helpers():
    api = StubApi({NAMESPACES: [ns(str(i)) for i in range(5)]}, page=2)
    assert len(list_namespaces(api, deadline=time.monotonic() + 5)) == 5
    unserved = StubApi({})
    del unserved.collections[NAMESPACES]
    with pytest.raises(ListingFailed):
        list_namespaces(unserved, deadline=time.monotonic() + 5)  # namespaces are always served
    assert class_uses(StubApi({}), "gold", deadline=time.monotonic() + 5) == []


def test_the_hook_is_the_priority_servers_and_takes_deletes():
    rule_set = priorityclasses.RULE_SET
    assert rule_set.server == "priority" and "DELETE" in rule_set.operations
    assert rule_set.timeout_seconds == 10
    assert (
        rule_set.timeout_seconds
        >= priorityclasses.DEFAULT_LIST_SECONDS + priorityclasses.ANSWER_MARGIN_SECONDS
    )
