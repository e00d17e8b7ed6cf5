"""Kubernetes resource quantities and pod effective requests, as exact values.

Quantities are parsed to `fractions.Fraction`, so "0.1" plus "0.2" is exactly "0.3" and
"1Gi" is exactly 1073741824: comparisons never suffer from float rounding. A `ResourceList`
is a plain `dict[str, Fraction]` keyed by resource name ("cpu", "memory", "nvidia.com/gpu").

The grammar is apimachinery's (`k8s.io/apimachinery/pkg/api/resource`):

    <quantity> ::= <signedNumber><suffix>
    <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei          (binary SI)
                 | n | u | m | "" | k | M | G | T | P | E   (decimal SI)
                 | e<int> | E<int>                     (decimal exponent)

Pure module: no I/O, no Kubernetes client.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from functools import lru_cache
from typing import Any

ResourceList = dict[str, Fraction]

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

_BINARY_SUFFIXES: dict[str, int] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_DECIMAL_SUFFIXES: dict[str, Fraction] = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# Alternation order matters: a lone "E" is exa, "E3" is an exponent; the regex backtracks
# from the single-letter suffix to the exponent form when text remains.
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<number>\d+\.?\d*|\.\d+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?"
)
# An exponent this large is certainly a typo and would build enormous integers.
_MAX_EXPONENT = 100

# Pod-level requests (spec.resources) may only set these (KEP-2837).
_POD_LEVEL_RESOURCES = (CPU, MEMORY)
_HUGEPAGES_PREFIX = "hugepages-"


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity ("500m", "1.5Gi", "1e3", 2, 0.5) to an exact Fraction.

    Raises ValueError, naming the offending text, for anything Kubernetes would reject."""
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}: a boolean is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"invalid quantity {value!r}: not a finite number")
        # repr() is the shortest decimal that round-trips, so 0.1 becomes exactly 1/10.
        return Fraction(repr(value))
    if not isinstance(value, str):
        raise ValueError(f"invalid quantity {value!r}: expected a string or a number")
    return _parse_quantity_text(value)


@lru_cache(maxsize=4096)
def _parse_quantity_text(text: str) -> Fraction:
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(
            f"invalid quantity {text!r}: expected a number with an optional suffix "
            "(m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent like e3)"
        )
    number = Fraction(match["number"])
    if match["sign"] == "-":
        number = -number
    suffix = match["suffix"] or ""
    if suffix in _BINARY_SUFFIXES:
        return number * _BINARY_SUFFIXES[suffix]
    if suffix in _DECIMAL_SUFFIXES:
        return number * _DECIMAL_SUFFIXES[suffix]
    exponent = int(suffix[1:])
    if abs(exponent) > _MAX_EXPONENT:
        raise ValueError(f"invalid quantity {text!r}: exponent {exponent} is out of range")
    return number * Fraction(10) ** exponent


def format_quantity(value: Fraction | int) -> str:
    """Canonical text for a quantity: "1500m", "2Gi", "3k", "7".

    Whole numbers take the largest binary suffix that divides them exactly, else the largest
    decimal one; fractions are written in m, u or n. Like Kubernetes, anything finer than a
    nano-unit is rounded up. `parse_quantity(format_quantity(q)) == q` for every q that is a
    whole number of nano-units."""
    q = Fraction(value)
    sign = "-" if q < 0 else ""
    q = abs(q)
    if q.denominator == 1:
        whole = q.numerator
        if whole == 0:
            return "0"
        for suffix, factor in reversed(_BINARY_SUFFIXES.items()):
            if whole % factor == 0:
                return f"{sign}{whole // factor}{suffix}"
        for suffix in ("E", "P", "T", "G", "M", "k"):
            factor = _DECIMAL_SUFFIXES[suffix].numerator
            if whole % factor == 0:
                return f"{sign}{whole // factor}{suffix}"
        return f"{sign}{whole}"
    for suffix in ("m", "u"):
        scaled = q / _DECIMAL_SUFFIXES[suffix]
        if scaled.denominator == 1:
            return f"{sign}{scaled.numerator}{suffix}"
    nanos = math.ceil(q * 10**9)
    return f"{sign}{nanos}n"


def ceil_value(q: Fraction) -> int:
    """The quantity rounded up to a whole unit, like Quantity.Value() (memory, pods, devices)."""
    return math.ceil(q)


def ceil_milli_value(q: Fraction) -> int:
    """The quantity in thousandths, rounded up, like Quantity.MilliValue() (cpu)."""
    return math.ceil(q * 1000)


# ---- ResourceList arithmetic ----------------------------------------------------------------


def parse_resource_list(raw: Mapping[str, Any] | None, *, context: str = "") -> ResourceList:
    """Parse a `{name: quantity}` mapping; errors name the resource (and `context`, if given)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        where = f"{context}: " if context else ""
        raise ValueError(f"{where}expected a map of resource quantities, got {type(raw).__name__}")
    parsed: ResourceList = {}
    for name, quantity in raw.items():
        try:
            parsed[str(name)] = parse_quantity(quantity)
        except ValueError as err:
            where = f"{context}: " if context else ""
            raise ValueError(f"{where}{name}: {err}") from None
    return parsed


def add(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> ResourceList:
    """Per-resource sum; a resource missing on one side counts as zero."""
    total = dict(a)
    for name, q in b.items():
        total[name] = total[name] + q if name in total else q
    return total


NANO = 10**9  # nano-units per unit: the finest Kubernetes quantities
_NANO = NANO


def positive_total(lists: Iterable[Mapping[str, Fraction]]) -> ResourceList:
    """Per-resource sum of the positive amounts of many lists (a negative amount counts as 0).
    Exact, as add(); amounts that are whole nano-units (every quantity Kubernetes writes) are
    summed as integers, several times faster than Fraction additions, which matters when a
    decision sums every reservation of a namespace."""
    nanos: dict[str, int] = {}
    rest: dict[str, Fraction] = {}
    for amounts in lists:
        for name, amount in amounts.items():
            if amount <= 0:
                continue
            denominator = amount.denominator
            if _NANO % denominator == 0:
                nanos[name] = nanos.get(name, 0) + amount.numerator * (_NANO // denominator)
            else:
                rest[name] = rest.get(name, Fraction(0)) + amount
    total = {name: Fraction(n, _NANO) for name, n in nanos.items()}
    for name, amount in rest.items():
        total[name] = total[name] + amount if name in total else amount
    return total


def nano_units(amounts: Mapping[str, Fraction]) -> dict[str, int | Fraction]:
    """The amounts times 10^9: ints for whole nano-units (every quantity Kubernetes writes),
    still exact Fractions otherwise. Sums and comparisons of the result are those of the
    amounts, exactly, and mostly integer arithmetic (see positive_total)."""
    return {
        name: amount.numerator * (_NANO // amount.denominator)
        if _NANO % amount.denominator == 0
        else amount * _NANO
        for name, amount in amounts.items()
    }


def subtract(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> ResourceList:
    """Per-resource difference a - b (may go negative: an overcommitted node is a fact)."""
    diff = dict(a)
    for name, q in b.items():
        diff[name] = diff.get(name, Fraction(0)) - q
    return diff


def maximum(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> ResourceList:
    """Per-resource maximum; a missing resource counts as zero."""
    most = dict(a)
    for name, q in b.items():
        most[name] = max(most[name], q) if name in most else max(q, Fraction(0))
    return most


def total(lists: Iterable[Mapping[str, Fraction]]) -> ResourceList:
    summed: ResourceList = {}
    for resources in lists:
        summed = add(summed, resources)
    return summed


def insufficient(request: Mapping[str, Fraction], available: Mapping[str, Fraction]) -> list[str]:
    """Names of the requested resources that do not fit, sorted.

    Only positive requests are checked, as the scheduler does: asking for zero of something
    fits even where that resource is overcommitted or absent."""
    return sorted(name for name, q in request.items() if q > 0 and q > available.get(name, Fraction(0)))


def fits(request: Mapping[str, Fraction], available: Mapping[str, Fraction]) -> bool:
    """True when every positive request is at most what is available."""
    return not insufficient(request, available)


# ---- Pod effective requests ---------------------------------------------------------------------


def container_requests(container: Mapping[str, Any], *, context: str = "") -> ResourceList:
    """A container's requests, with the API server's defaulting: a resource that has a limit
    but no request requests its limit."""
    resources = _mapping(container.get("resources"), f"{context} resources")
    requests = parse_resource_list(resources.get("requests"), context=f"{context} requests")
    limits = parse_resource_list(resources.get("limits"), context=f"{context} limits")
    for name, q in limits.items():
        requests.setdefault(name, q)
    return requests


def pod_requests(pod: Mapping[str, Any]) -> ResourceList:
    """The resources the scheduler reserves for a pod (resourcehelper.PodRequests).

    The larger of the sum of the app containers (plus restartable "sidecar" init containers)
    and the largest init container (plus the sidecars started before it), per resource; then
    pod-level requests for cpu, memory and hugepages where set; then spec.overhead added."""
    spec = _mapping(pod.get("spec"), "pod spec")
    name = _mapping(pod.get("metadata"), "pod metadata").get("name", "?")
    reqs: ResourceList = {}
    for container in _containers(spec, "containers", name):
        reqs = add(reqs, container_requests(container, context=_where(name, container)))
    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for container in _containers(spec, "initContainers", name):
        own = container_requests(container, context=_where(name, container))
        if container.get("restartPolicy") == "Always":
            # A sidecar keeps running next to the app containers and later init containers.
            reqs = add(reqs, own)
            sidecars = add(sidecars, own)
            running = sidecars
        else:
            running = add(own, sidecars)
        init_peak = maximum(init_peak, running)
    reqs = maximum(reqs, init_peak)
    pod_level = parse_resource_list(
        _mapping(spec.get("resources"), f"pod {name} spec.resources").get("requests"),
        context=f"pod {name} spec.resources.requests",
    )
    for resource, q in pod_level.items():
        if resource in _POD_LEVEL_RESOURCES or resource.startswith(_HUGEPAGES_PREFIX):
            reqs[resource] = q
    overhead = parse_resource_list(spec.get("overhead"), context=f"pod {name} spec.overhead")
    return add(reqs, overhead)


def _where(pod_name: str, container: Mapping[str, Any]) -> str:
    return f"pod {pod_name} container {container.get('name', '?')}"


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be an object, got {type(value).__name__}")
    return value


def _containers(spec: Mapping[str, Any], field: str, pod_name: str) -> list[Mapping[str, Any]]:
    containers = spec.get(field)
    if containers is None:
        return []
    if not isinstance(containers, list) or not all(isinstance(c, Mapping) for c in containers):
        raise ValueError(f"pod {pod_name} spec.{field} must be a list of objects")
    return containers
