"""A class the priority hooks' cache has not heard of yet is read from the API server before it
is called missing (webhook.class_lookup), through each hook that resolves a class."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from priogate import priority
from priogate.kube.client import ApiError
from tests.builders import pod, priority_class
from tests.fake_api import FakeApi
from tests.reviews import make_view, review
from webhook.class_lookup import resolve
from webhook.review import parse_review
from webhook.rules import pod_priority

CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


def view_with(stored: list[dict[str, Any]], cached: tuple[dict[str, Any], ...] = ()):
    api = FakeApi()
    for cls in stored:
        api.put_object(CLASSES, cls)
    view = make_view(cached)
    view.client = api
    return api, view


def test_a_class_stored_a_moment_ago_resolves_though_the_cache_lacks_it():
    api, view = view_with([priority_class("fresh", value=700)])
    got = resolve("fresh", view)
    assert (got.priority, got.class_name) == (700, "fresh")
    assert api.reads_of(f"{CLASSES}/fresh") == [()]  # one quorum GET


def test_a_cached_class_costs_no_read_and_a_missing_one_is_still_missing():
    api, view = view_with([], cached=(priority_class("cached", value=5),))
    assert resolve("cached", view).priority == 5
    with pytest.raises(priority.ClassNotFound, match="no PriorityClass with name nope was found"):
        resolve("nope", view)
    assert [c.path for c in api.calls] == [f"{CLASSES}/nope"]


@pytest.mark.parametrize("name", ["../../../api/v1/secrets", "UPPER", "a" * 254, "sp ace", "trailing\n"])
def test_a_name_no_class_can_have_is_never_sent_to_the_api_server(name):
    api, view = view_with([])
    with pytest.raises(priority.ClassNotFound):
        resolve(name, view)
    assert api.calls == []


def test_an_api_server_that_cannot_answer_leaves_the_class_missing():
    api, view = view_with([])

    def unavailable(*_: Any, **__: Any) -> dict:
        raise ApiError(503, "ServiceUnavailable", "etcd")

    api.get = unavailable  # type: ignore[method-assign]
    with pytest.raises(priority.ClassNotFound):
        resolve("fresh", view)


def test_the_pod_priority_hook_resolves_a_class_stored_a_moment_ago():
    _, view = view_with([priority_class("fresh", value=700)])
    answer = pod_priority.admit(parse_review(orjson.dumps(review(pod("p", priority_class="fresh")))), view)
    assert answer.allowed
    assert {"op": "add", "path": "/spec/priority", "value": 700} in answer.patch
