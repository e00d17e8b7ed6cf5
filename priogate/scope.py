"""Which namespaces the quota hooks are called in: the enrolment label and the coverage probe.

kube-apiserver sends a namespace's pods to the pod quota hook only when the namespace carries
ENROLLED_LABEL (the hook's namespaceSelector). priogate sets the label before the namespace's
first reservation is admitted and never removes it (the controller puts it back where it went
missing), so every namespace that holds or held a reservation is covered and every other
namespace's pod creates cost no webhook call.

Why a probe: kube-apiserver matches a namespaceSelector against its namespace informer's cache
(staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/namespace/matcher.go,
GetNamespaceLabels reads the lister), which lags the label write. The label in etcd proves
nothing about routing; a request that kube-apiserver routed by it does. The probe is a dry-run
CREATE of a PodGroup named PROBE_NAME: kube-apiserver sends it to the reservation hook only if
it sees the label, else to the enrolment hook (their selectors are complements), and each hook
answers a probe with its own refusal. Every hook of kube-apiserver shares one namespace
informer (the admission plugins are handed the same SharedInformerFactory), so the reservation
hook seeing the label means the pod quota hook, with the same selector, sees it too.

kube-apiserver calls a webhook on a dry-run request only if it declares sideEffects None or
NoneOnDryRun (KEP-576, APIServer dry run; the dispatchers in staging/src/k8s.io/apiserver/pkg/
admission/plugin/webhook/ refuse the request otherwise), which both priogate hooks do. A
third-party PodGroup webhook that does not would make every probe fail: the enrolment then
refuses with "retry" and names what the probe met.

A probe is recognised only on a dry-run request (nothing is ever stored by answering one) and
only ever refused; a tenant who sends one learns whether their namespace is enrolled, which the
built-in `view` role already shows them. A non-dry-run object of the probe's name is an
ordinary PodGroup.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from priogate import podgroup
from priogate.resources import parse_quantity

ENROLLED_LABEL = "priogate.io/reservations"
ENROLLED_VALUE = "true"
PROBE_NAME = "priogate-coverage-probe"
# The probes' refusals. Each is prefixed by kube-apiserver with the hook's name (ToStatusErr in
# staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors/statuserror.go).
COVERED = "coverage probe: kube-apiserver routes this namespace to the quota hooks"
NOT_COVERED = "coverage probe: kube-apiserver does not see this namespace's enrolment yet"


def is_probe(name: str, dry_run: bool) -> bool:
    return dry_run and name == PROBE_NAME


def probe_body() -> dict[str, Any]:
    """The probe PodGroup. It claims something, so the enrolment hook's matchConditions (which
    skip PodGroups that claim nothing) let it through."""
    return {
        "apiVersion": podgroup.GROUP_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": PROBE_NAME},
        "spec": {"minMember": 1, "minResources": {"cpu": "0"}},
    }


def probe_verdict(refusal: str | None, reservation_hook: str, enrolment_hook: str) -> bool | None:
    """True when the probe's refusal came from the reservation hook (covered), False when from
    the enrolment hook (not yet), None when it tells neither (admitted, or refused by something
    else: retry)."""
    if refusal is None:
        return None
    if f'"{reservation_hook}" denied the request: {COVERED}' in refusal:
        return True
    if f'"{enrolment_hook}" denied the request: {NOT_COVERED}' in refusal:
        return False
    return None


def enrolled(labels: Mapping[str, str] | None) -> bool:
    return (labels or {}).get(ENROLLED_LABEL) == ENROLLED_VALUE


def reserves(min_resources: Mapping[str, Any], min_member: int) -> bool:
    """Whether a claim reserves anything: a pod (minMember, counted against a quota's pods) or a
    positive amount (one that does not parse counts: it is refused elsewhere, and enrolling for
    it costs only a round trip)."""
    if min_member > 0:
        return True
    for value in min_resources.values():
        try:
            if parse_quantity(value) > 0:
                return True
        except ValueError:
            return True
    return False


def claim_of(spec: Mapping[str, Any]) -> tuple[Mapping[str, Any], int]:
    """A PodGroup spec's claim for reserves(): its minResources and minMember (absent: the
    default; not a count: 1, so that it enrols and is refused where it is read)."""
    min_resources = spec.get("minResources")
    min_member = spec.get("minMember", podgroup.DEFAULT_MIN_MEMBER)
    if not isinstance(min_member, int) or isinstance(min_member, bool):
        min_member = 1
    return (min_resources if isinstance(min_resources, Mapping) else {}), min_member


def needs_enrolment(
    labels: Mapping[str, str] | None, claims: Iterable[tuple[Mapping[str, Any], int]]
) -> bool:
    """A namespace that holds a reservation (the claims: its ledger's entries and its stored
    groups, as (minResources, minMember)) but lacks the label: one that reserved before
    enrolment existed, or whose label someone removed. The controller's backstop enrols it
    (controller/enrol.py)."""
    return not enrolled(labels) and any(reserves(*c) for c in claims)
