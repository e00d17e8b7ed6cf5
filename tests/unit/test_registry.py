"""Which server answers which rule set, and the threads each server gets."""

from __future__ import annotations

import pytest

from webhook.registry import SERVERS, default_threads, load_rule_sets


@pytest.mark.parametrize(
    ("servers", "paths"),
    [
        (
            ("priority",),
            {
                "/mutate/pods",
                "/mutate/native-podgroups",
                "/validate/priorityclasses",
                "/mutate/namespaces",
                "/mutate/namespace-default-pods",
                "/mutate/namespace-default-native-podgroups",
            },
        ),
        (
            ("quota",),
            {
                "/mutate/podgroups",
                "/validate/podgroups",
                "/validate/podgroups-enrolment",
                "/validate/podgroup-annotations",
                "/validate/pods",
                "/validate/resourcequotas",
                "/mutate/pod-gate",
                "/validate/pod-gate",
            },
        ),
        (
            None,
            {
                "/mutate/pods",
                "/mutate/native-podgroups",
                "/validate/priorityclasses",
                "/mutate/namespaces",
                "/mutate/namespace-default-pods",
                "/mutate/namespace-default-native-podgroups",
                "/mutate/podgroups",
                "/validate/podgroups",
                "/validate/podgroups-enrolment",
                "/validate/podgroup-annotations",
                "/validate/pods",
                "/validate/resourcequotas",
                "/mutate/pod-gate",
                "/validate/pod-gate",
                "/validate/preemption-preview",
                "/validate/podgroup-preemption-preview",
            },
        ),
        (("preview",), {"/validate/preemption-preview", "/validate/podgroup-preemption-preview"}),
    ],
)
def test_rule_sets_by_server(servers, paths):
    assert {r.path for r in load_rule_sets(servers=servers)} == paths


def test_unknown_server_is_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown server.*choose from priority, quota"):
        load_rule_sets(servers=("priorty",))


@pytest.mark.parametrize(
    ("servers", "threads"),
    [(("priority",), SERVERS["priority"]), (("quota",), SERVERS["quota"]), (("priority", "quota"), 64)],
)
def test_a_process_serving_several_servers_gets_the_most_threads(servers, threads):
    assert default_threads(servers) == threads
