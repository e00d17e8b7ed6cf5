"""Quantity parsing, ResourceList arithmetic and pod effective requests (priogate.resources)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from priogate import resources as r

F = Fraction


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0", F(0)),
        ("1", F(1)),
        ("500m", F(1, 2)),
        ("1500m", F(3, 2)),
        ("0.5", F(1, 2)),
        (".5", F(1, 2)),
        ("5.", F(5)),
        ("2k", F(2000)),
        ("3M", F(3 * 10**6)),
        ("1G", F(10**9)),
        ("1T", F(10**12)),
        ("1P", F(10**15)),
        ("1E", F(10**18)),
        ("1Ki", F(1024)),
        ("1Mi", F(2**20)),
        ("1.5Gi", F(3 * 2**29)),
        ("1Ti", F(2**40)),
        ("1Pi", F(2**50)),
        ("1Ei", F(2**60)),
        ("1e3", F(1000)),
        ("1E3", F(1000)),
        ("1e+3", F(1000)),
        ("25e-1", F(5, 2)),
        ("1.5e2", F(150)),
        ("100n", F(1, 10**7)),
        ("5u", F(5, 10**6)),
        ("+2", F(2)),
        ("-2", F(-2)),
        ("-500m", F(-1, 2)),
        ("0.1", F(1, 10)),
        ("123456789012345678901234567890", F(123456789012345678901234567890)),
    ],
)
def test_parse_quantity_text(text, want):
    assert r.parse_quantity(text) == want


@pytest.mark.parametrize(
    ("value", "want"), [(2, F(2)), (0, F(0)), (0.5, F(1, 2)), (0.1, F(1, 10)), (1e3, F(1000))]
)
def test_parse_quantity_numbers(value, want):
    assert r.parse_quantity(value) == want


def test_sums_are_exact():
    assert r.parse_quantity("0.1") + r.parse_quantity("0.2") == r.parse_quantity("0.3")
    assert r.parse_quantity("100m") * 3 == r.parse_quantity("300m")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        " ",
        "1 ",
        " 1",
        "abc",
        "1x",
        "1KI",
        "1ki",
        "1e",
        "e3",
        "1.2.3",
        "--1",
        "1Mi2",
        "m",
        "1e1000",
        "0x10",
    ],
)
def test_parse_quantity_rejects_bad_text(bad):
    with pytest.raises(ValueError, match="invalid quantity"):
        r.parse_quantity(bad)


@pytest.mark.parametrize("bad", [True, None, [1], {"a": 1}, float("nan"), float("inf")])
def test_parse_quantity_rejects_non_quantities(bad):
    with pytest.raises(ValueError, match="invalid quantity"):
        r.parse_quantity(bad)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (F(0), "0"),
        (F(7), "7"),
        (F(1, 2), "500m"),
        (F(3, 2), "1500m"),
        (F(2000), "2k"),
        (F(1024), "1Ki"),
        (F(3 * 2**29), "1536Mi"),
        (F(2**30), "1Gi"),
        (F(10**9), "1G"),
        (F(5, 10**6), "5u"),
        (F(1, 10**7), "100n"),
        (F(-1, 2), "-500m"),
        (F(1, 3), "333333334n"),  # finer than a nano-unit: rounded up, as Kubernetes does
    ],
)
def test_format_quantity(value, want):
    assert r.format_quantity(value) == want


@given(st.integers(min_value=-(10**21), max_value=10**21))
def test_format_parse_round_trip_on_nano_grid(nanos):
    q = F(nanos, 10**9)
    assert r.parse_quantity(r.format_quantity(q)) == q


@pytest.mark.parametrize(
    ("q", "milli", "whole"),
    [(F(1, 2), 500, 1), (F(1, 3000), 1, 1), (F(2), 2000, 2), (F(0), 0, 0), (F(10**9 + 1, 10**9), 1001, 2)],
)
def test_ceil_values(q, milli, whole):
    assert r.ceil_milli_value(q) == milli
    assert r.ceil_value(q) == whole


def test_resource_list_arithmetic():
    a = {"cpu": F(1), "memory": F(100)}
    b = {"cpu": F(1, 2), "nvidia.com/gpu": F(1)}
    assert r.add(a, b) == {"cpu": F(3, 2), "memory": F(100), "nvidia.com/gpu": F(1)}
    assert r.subtract(a, b) == {"cpu": F(1, 2), "memory": F(100), "nvidia.com/gpu": F(-1)}
    assert r.maximum(a, b) == {"cpu": F(1), "memory": F(100), "nvidia.com/gpu": F(1)}
    assert r.total([a, b, b]) == {"cpu": F(2), "memory": F(100), "nvidia.com/gpu": F(2)}
    assert a == {"cpu": F(1), "memory": F(100)}, "inputs are not modified"


@pytest.mark.parametrize(
    ("request_", "available", "short"),
    [
        ({"cpu": F(1)}, {"cpu": F(1)}, []),  # an exact fit counts
        ({"cpu": F(2)}, {"cpu": F(1)}, ["cpu"]),
        ({"cpu": F(1), "memory": F(5)}, {"cpu": F(0), "memory": F(1)}, ["cpu", "memory"]),
        ({"nvidia.com/gpu": F(1)}, {"cpu": F(8)}, ["nvidia.com/gpu"]),  # absent means zero
        ({"cpu": F(0)}, {"cpu": F(-3)}, []),  # zero requests are never checked
        ({}, {}, []),
    ],
)
def test_fits_and_insufficient(request_, available, short):
    assert r.insufficient(request_, available) == short
    assert r.fits(request_, available) is (not short)


def test_parse_resource_list_names_the_bad_entry():
    with pytest.raises(ValueError, match="pod x: memory: invalid quantity 'lots'"):
        r.parse_resource_list({"cpu": "1", "memory": "lots"}, context="pod x")
    with pytest.raises(ValueError, match="expected a map"):
        r.parse_resource_list(["cpu"])


def _pod(containers=(), init=(), overhead=None, pod_level=None):
    spec = {"containers": list(containers), "initContainers": list(init)}
    if overhead is not None:
        spec["overhead"] = overhead
    if pod_level is not None:
        spec["resources"] = {"requests": pod_level}
    return {"metadata": {"name": "p"}, "spec": spec}


def _c(name, requests=None, limits=None, restart=None):
    c = {"name": name, "resources": {}}
    if requests is not None:
        c["resources"]["requests"] = requests
    if limits is not None:
        c["resources"]["limits"] = limits
    if restart is not None:
        c["restartPolicy"] = restart
    return c


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        (_pod(), {}),
        (
            _pod([_c("a", {"cpu": "100m"}), _c("b", {"cpu": "200m", "memory": "1Gi"})]),
            {"cpu": F(3, 10), "memory": F(2**30)},
        ),
        # the largest init container wins when it is bigger than the sum of the app containers
        (
            _pod([_c("a", {"cpu": "1"})], init=[_c("i1", {"cpu": "2"}), _c("i2", {"cpu": "500m"})]),
            {"cpu": F(2)},
        ),
        (
            _pod([_c("a", {"cpu": "3"})], init=[_c("i1", {"cpu": "2", "memory": "1"})]),
            {"cpu": F(3), "memory": F(1)},
        ),
        # overhead is added after the max
        (
            _pod([_c("a", {"cpu": "1"})], init=[_c("i", {"cpu": "2"})], overhead={"cpu": "250m"}),
            {"cpu": F(9, 4)},
        ),
        # a limit without a request defaults the request
        (
            _pod([_c("a", limits={"cpu": "2", "memory": "1Gi"}, requests={"memory": "512Mi"})]),
            {"cpu": F(2), "memory": F(2**29)},
        ),
        # sidecars run next to the app containers and under later init containers
        (
            _pod(
                [_c("app", {"cpu": "1"})],
                init=[_c("side", {"cpu": "500m"}, restart="Always"), _c("setup", {"cpu": "2"})],
            ),
            {"cpu": F(5, 2)},
        ),
        (
            _pod(
                [_c("app", {"cpu": "1"})],
                init=[_c("setup", {"cpu": "2"}), _c("side", {"cpu": "500m"}, restart="Always")],
            ),
            {"cpu": F(2)},
        ),
        # pod-level requests replace the aggregate for cpu and memory only
        (
            _pod(
                [_c("a", {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"})],
                pod_level={"cpu": "3", "example.com/x": "9"},
            ),
            {"cpu": F(3), "memory": F(2**30), "nvidia.com/gpu": F(1)},
        ),
    ],
)
def test_pod_requests(pod, want):
    assert r.pod_requests(pod) == want


def test_pod_requests_bad_quantity_names_pod_and_container():
    pod = _pod([_c("web", {"cpu": "fast"})])
    with pytest.raises(ValueError, match="pod p container web requests: cpu: invalid quantity 'fast'"):
        r.pod_requests(pod)


@given(
    st.lists(st.integers(0, 5000), max_size=4),
    st.lists(st.integers(0, 5000), max_size=4),
)
def test_pod_requests_is_max_of_sum_and_largest_init(app_millis, init_millis):
    pod = _pod(
        [_c(f"a{i}", {"cpu": f"{m}m"}) for i, m in enumerate(app_millis)],
        init=[_c(f"i{i}", {"cpu": f"{m}m"}) for i, m in enumerate(init_millis)],
    )
    want = F(max([sum(app_millis), *init_millis]), 1000)
    assert r.pod_requests(pod).get("cpu", F(0)) == want


AMOUNTS = st.one_of(
    st.integers(min_value=-(10**15), max_value=10**15).map(lambda n: Fraction(n, 10**9)),
    st.fractions(max_denominator=10**12),  # off the nano grid: the slow path
)


@given(st.lists(st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), AMOUNTS), max_size=30))
def test_positive_total_is_the_exact_sum_of_positive_amounts(lists):
    want: dict[str, Fraction] = {}
    for amounts in lists:
        want = r.add(want, {n: a for n, a in amounts.items() if a > 0})
    assert r.positive_total(lists) == want
