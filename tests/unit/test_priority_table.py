"""The PriorityClass table kube-apiserver's in-process policy resolves pods from
(priogate/priority_table.py), the controller's writer of it (controller/priority_table.py), and
the pod priority hook's half of the hand-off: it removes the policy's mark."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from controller.priority_table import ATTEMPTS, PriorityTableWriter, TableConflict
from priogate.kube.client import ApiError
from priogate.priority_table import MARKER_ANNOTATION, TABLE_NAME, table_data, table_object
from tests.builders import SYSTEM_CLASSES, pod, priority_class
from tests.fake_api import FakeApi
from tests.reviews import make_view, review
from webhook.review import parse_review
from webhook.rules import pod_priority

NAMESPACE = "priogate-system"
CONFIGMAPS = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
TABLE = f"{CONFIGMAPS}/{TABLE_NAME}"


@pytest.mark.parametrize(
    "classes, want",
    [
        ([], {"complete": "true"}),
        (
            [priority_class("high", value=1000), priority_class("low", value=-5, preemption_policy="Never")],
            {"class.high": "1000 PreemptLowerPriority", "class.low": "-5 Never", "complete": "true"},
        ),
        # A class stored without a policy is treated as defaulted, as priority.class_policy does.
        (
            [priority_class("bare", value=3, preemption_policy=None)],
            {"class.bare": "3 PreemptLowerPriority", "complete": "true"},
        ),
        # Two globalDefaults (possible only around an outage): the plugin's pick, the lowest value.
        (
            [
                priority_class("d1", value=9, default=True),
                priority_class("d2", value=4, default=True),
            ],
            {
                "class.d1": "9 PreemptLowerPriority",
                "class.d2": "4 PreemptLowerPriority",
                "globalDefault": "d2",
                "complete": "true",
            },
        ),
        # A class named like a table key stays apart from it.
        (
            [priority_class("complete", value=1)],
            {"class.complete": "1 PreemptLowerPriority", "complete": "true"},
        ),
        (
            list(SYSTEM_CLASSES),
            {
                "class.system-cluster-critical": "2000000000 PreemptLowerPriority",
                "class.system-node-critical": "2000001000 PreemptLowerPriority",
                "complete": "true",
            },
        ),
    ],
)
def test_table_data(classes, want):
    assert table_data(classes) == want


def test_the_placeholder_is_not_complete():
    assert "complete" not in table_object(NAMESPACE)["data"]


def writer(api: FakeApi, classes: list[dict[str, Any]]) -> PriorityTableWriter:
    return PriorityTableWriter(api, NAMESPACE, lambda: classes)


def test_the_writer_creates_the_table_then_writes_only_what_changed():
    classes = [priority_class("high", value=1000)]
    api = FakeApi()
    w = writer(api, classes)
    assert w.sync() == "created"
    assert api.objects[TABLE]["data"] == table_data(classes)
    assert w.sync() == "unchanged"
    assert [c.method for c in api.writes] == ["POST"]

    classes.append(priority_class("dflt", value=7, default=True))
    assert w.sync() == "written"
    assert api.objects[TABLE]["data"]["globalDefault"] == "dflt"
    # Under the resourceVersion it read.
    assert api.writes[-1].method == "PUT"
    assert api.writes[-1].body["metadata"]["resourceVersion"]


def test_the_writer_fills_the_placeholder_and_restores_a_hand_edit():
    api = FakeApi()
    api.put_object(CONFIGMAPS, table_object(NAMESPACE))
    w = writer(api, [priority_class("high", value=1000)])
    assert w.sync() == "written"
    api.objects[TABLE]["data"]["class.high"] = "1 Never"  # an edit by hand
    assert w.sync() == "written"
    assert api.objects[TABLE]["data"]["class.high"] == "1000 PreemptLowerPriority"
    # A deleted table is made again.
    api.remove(TABLE)
    assert w.sync() == "created"


def test_the_writer_reads_again_after_a_conflict_and_gives_up_after_a_few():
    api = FakeApi()
    api.put_object(CONFIGMAPS, table_object(NAMESPACE))
    real_request = api.request
    conflicts = {"left": 1}

    def request(method: str, path: str, **kw: Any) -> dict:
        if method == "PUT" and conflicts["left"] > 0:
            conflicts["left"] -= 1
            raise ApiError(409, "Conflict", "the object has been modified")
        return real_request(method, path, **kw)

    api.request = request  # type: ignore[method-assign]
    w = writer(api, [priority_class("high", value=1000)])
    assert w.sync() == "written"
    assert len(api.reads_of(TABLE)) == 2

    conflicts["left"] = ATTEMPTS
    w.classes = lambda: [priority_class("other", value=2)]
    with pytest.raises(TableConflict):
        w.sync()


def test_an_api_error_other_than_a_conflict_is_raised():
    api = FakeApi()

    def unavailable(*_: Any, **__: Any) -> dict:
        raise ApiError(503, "ServiceUnavailable", "etcd")

    api.get = unavailable  # type: ignore[method-assign]
    with pytest.raises(ApiError):
        writer(api, []).sync()


# ---- the hook removes the mark ----------------------------------------------------------------

MARKED = {MARKER_ANNOTATION: "true"}
UNMARK = {"op": "remove", "path": "/metadata/annotations/priogate.io~1priority-unresolved"}


def admit(obj: dict, **kw: Any):
    view = make_view((priority_class("high", value=1000),))
    return pod_priority.admit(parse_review(orjson.dumps(review(obj, **kw))), view)


@pytest.mark.parametrize(
    "obj, unmarked",
    [
        (pod("p", priority_class="high", annotations=MARKED), True),
        (pod("p", priority_class="high", priority=1000, annotations={**MARKED, "keep": "me"}), True),
        (pod("p", priority_class="high"), False),
    ],
)
def test_the_hook_removes_the_policys_mark_from_a_pod_it_resolves(obj, unmarked):
    answer = admit(obj)
    assert answer.allowed
    assert (UNMARK in answer.patch) is unmarked
    assert {"op": "add", "path": "/spec/preemptionPolicy", "value": "PreemptLowerPriority"} in answer.patch


def test_a_marked_pod_is_refused_as_the_plugin_refuses_it():
    answer = admit(pod("p", priority_class="missing", annotations=MARKED))
    assert not answer.allowed
    assert answer.message == 'pods "p" is forbidden: no PriorityClass with name missing was found'


def test_a_mark_set_on_an_update_is_removed_too():
    old = pod("p", priority_class="high", priority=1000, preemption_policy="PreemptLowerPriority")
    new = pod(
        "p",
        priority_class="high",
        priority=1000,
        preemption_policy="PreemptLowerPriority",
        annotations=MARKED,
    )
    answer = admit(new, operation="UPDATE", old=old)
    assert answer.allowed
    assert answer.patch == [UNMARK]
