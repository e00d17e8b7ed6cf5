"""The quota server's pods cache keeps PodGroup members only, and only what the quota check
reads; everything derived from a slimmed pod equals what the whole pod gives."""

from __future__ import annotations

import copy

import pytest

from priogate import podgroup
from priogate.kube.cache import WatchCache
from priogate.resources import pod_requests
from priogate.slim import group_member_essentials


def member(name: str = "m0", *, link: str = "annotation", phase: str = "Running") -> dict:
    meta: dict = {
        "name": name,
        "namespace": "team-a",
        "uid": f"uid-{name}",
        "resourceVersion": "7",
        "labels": {"app": "train", "tier": "batch"},
        "annotations": {"note": "x" * 200},
        "ownerReferences": [{"kind": "Job", "name": "train", "uid": "j"}],
    }
    if link == "annotation":
        meta["annotations"][podgroup.GROUP_ANNOTATION] = "gang"
    else:
        meta["labels"][podgroup.GROUP_LABEL] = "gang"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": "node-1",
            "overhead": {"cpu": "100m"},
            "initContainers": [
                {
                    "name": "proxy",
                    "image": "i",
                    "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "1"}},
                },
                {"name": "setup", "image": "i", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}},
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "i",
                    "env": [{"name": f"E{i}", "value": "v" * 30} for i in range(20)],
                    "resources": {"requests": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "1"}},
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
        "status": {"phase": phase, "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]},
    }


@pytest.mark.parametrize("link", ["annotation", "label"])
@pytest.mark.parametrize("phase", ["Pending", "Running"])
def test_a_slimmed_member_gives_the_same_answers(link, phase):
    pod = member(link=link, phase=phase)
    slim = group_member_essentials(copy.deepcopy(pod))
    assert slim is not None
    assert pod_requests(slim) == pod_requests(pod)
    assert podgroup.group_of(slim) == podgroup.group_of(pod) == "gang"
    assert podgroup.is_terminal(slim) == podgroup.is_terminal(pod)
    assert slim["metadata"]["uid"] == pod["metadata"]["uid"]
    assert len(repr(slim)) < len(repr(pod)) / 2


def test_pods_outside_any_group_are_not_kept():
    pod = member()
    del pod["metadata"]["annotations"][podgroup.GROUP_ANNOTATION]
    assert group_member_essentials(pod) is None


def test_a_cache_with_the_transform_follows_membership():
    cache = WatchCache.static("pods", [])
    cache.transform = group_member_essentials
    loner = member("loner")
    del loner["metadata"]["annotations"][podgroup.GROUP_ANNOTATION]
    before = cache.namespace_generation("team-a")
    cache.apply_event("ADDED", loner)
    assert cache.get("team-a", "loner") is None
    assert cache.namespace_generation("team-a") == before, "nothing stored changed"

    cache.apply_event("ADDED", member("m0"))
    assert cache.get("team-a", "m0")["spec"]["containers"][0].get("env") is None
    left = member("m0")
    del left["metadata"]["annotations"][podgroup.GROUP_ANNOTATION]  # the link removed
    cache.apply_event("MODIFIED", left)
    assert cache.get("team-a", "m0") is None

    cache.replace_all([member("m1"), loner], "9")
    assert set(cache.namespace("team-a")) == {"m1"}
