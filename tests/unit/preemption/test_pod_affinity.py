"""Parsing and matching of required pod (anti-)affinity terms and host ports (pod_affinity.py),
as kube-scheduler reads them."""

from __future__ import annotations

from typing import Any

import pytest

from priogate.preemption.pod_affinity import HostPort, parse_host_ports, parse_pod_affinity


def container(*ports: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "c", "ports": list(ports), **extra}


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ({"containers": [container({"containerPort": 80})]}, ()),  # no hostPort: none held
        ({"containers": [container({"containerPort": 80, "hostPort": 0})]}, ()),
        ({"containers": [container({"hostPort": 80})]}, (HostPort("0.0.0.0", "TCP", 80),)),
        (
            {"containers": [container({"hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"})]},
            (HostPort("10.0.0.1", "UDP", 53),),
        ),
        # only restartable (sidecar) init containers hold their ports while the pod runs
        ({"containers": [], "initContainers": [container({"hostPort": 80})]}, ()),
        (
            {"containers": [], "initContainers": [container({"hostPort": 80}, restartPolicy="Always")]},
            (HostPort("0.0.0.0", "TCP", 80),),
        ),
    ],
)
def test_host_ports(spec, want):
    assert parse_host_ports(spec, "Pod ns/p") == want


@pytest.mark.parametrize(
    ("a", "b", "conflict"),
    [
        (HostPort("0.0.0.0", "TCP", 80), HostPort("10.0.0.1", "TCP", 80), True),
        (HostPort("10.0.0.1", "TCP", 80), HostPort("10.0.0.2", "TCP", 80), False),
        (HostPort("10.0.0.1", "TCP", 80), HostPort("10.0.0.1", "TCP", 80), True),
        (HostPort("0.0.0.0", "TCP", 80), HostPort("0.0.0.0", "UDP", 80), False),
        (HostPort("0.0.0.0", "TCP", 80), HostPort("0.0.0.0", "TCP", 81), False),
    ],
)
def test_host_port_conflicts(a, b, conflict):
    assert a.conflicts(b) is conflict and b.conflicts(a) is conflict


def terms(**term: Any) -> dict[str, Any]:
    return {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", **term}
                ]
            }
        }
    }


@pytest.mark.parametrize(
    ("term", "namespace", "labels", "want"),
    [
        ({"labelSelector": {"matchLabels": {"app": "x"}}}, "own", {"app": "x"}, True),
        (
            {"labelSelector": {"matchLabels": {"app": "x"}}},
            "other",
            {"app": "x"},
            False,
        ),  # own namespace only
        ({"labelSelector": {"matchLabels": {"app": "x"}}}, "own", {"app": "y"}, False),
        ({}, "own", {"app": "x"}, False),  # no labelSelector: selects nothing
        ({"labelSelector": {}}, "own", {"app": "x"}, True),  # empty: selects everything
        ({"labelSelector": {}, "namespaces": ["other"]}, "other", {}, True),
        ({"labelSelector": {}, "namespaces": ["other"]}, "own", {}, False),
        ({"labelSelector": {}, "namespaceSelector": {}}, "anywhere", {}, True),
        ({"labelSelector": {}, "namespaceSelector": {"matchLabels": {"t": "1"}}}, "other", {}, None),
        (
            {"labelSelector": {}, "namespaces": ["other"], "namespaceSelector": {"matchLabels": {"t": "1"}}},
            "other",
            {},
            True,
        ),
    ],
)
def test_term_matching(term, namespace, labels, want):
    affinity, anti = parse_pod_affinity(terms(**term), "own", "Pod own/p")
    assert affinity == ()
    (parsed,) = anti
    assert parsed.matches(namespace, labels) is want


@pytest.mark.parametrize(
    "spec",
    [
        {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
        {
            "affinity": {
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}
            }
        },
        {"containers": [container({"hostPort": "80"})]},
    ],
)
def test_malformed_input_names_the_pod(spec):
    with pytest.raises(ValueError, match="Pod ns/p"):
        if "containers" in spec:
            parse_host_ports(spec, "Pod ns/p")
        else:
            parse_pod_affinity(spec, "ns", "Pod ns/p")
