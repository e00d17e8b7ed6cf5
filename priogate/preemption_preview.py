"""The preemption preview's pure parts: the object a dry-run create would store, as the engine's
pending preemptor, and the one warning kube-apiserver passes back to the client (kubectl prints
it as `Warning: ...`) when placing that object would take preemption.

The engine decides (priogate.preemption.engine.decide_pod and decide_group, the steps `simulate`
takes for one preemptor); this module only shapes its input and words its outcome.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

from priogate.podgroup import Phase
from priogate.preemption.engine import (
    FINISHED_GROUP,
    GANG_MEMBER,
    NOT_A_POD,
    NOT_IN_SNAPSHOT,
    NOT_PENDING,
    NOTHING_TO_PLACE,
    PENDING_GROUP,
)
from priogate.preemption.outcome import Outcome

PREFIX = "priogate: preview:"
# "Individual warnings over 256 characters may be truncated by the API server before being
# returned to clients" (Kubernetes docs, "Dynamic Admission Control", Response, Warnings).
MAX_WARNING_CHARS = 256
MAX_NAMESPACES = 5
# Suffix of a generateName object's name in the preview, as `kubectl priogate simulate -f` names it.
GENERATED_SUFFIX = "hypothetical"
# Outcomes that say the object is not a preemptor at all (bound, gated, a gang member its group
# decides for, a group with nothing to place): nothing to preview, so no warning.
NOT_A_PREEMPTOR = frozenset(
    {NOT_A_POD, NOT_PENDING, GANG_MEMBER, FINISHED_GROUP, NOT_IN_SNAPSHOT, NOTHING_TO_PLACE, PENDING_GROUP}
)
# A DNS-1123 subdomain, what kube-apiserver allows as a namespace or object name; anything else
# (a malformed cached object) is quoted as JSON, so no text of the cluster's can shape the line.
_PLAIN_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def pending(obj: Mapping[str, Any], kind: str, namespace: str, now: str) -> dict[str, Any]:
    """The object as it would be right after its create, as `kubectl priogate simulate -f` takes
    it (kubectl_priogate/simulation.py hypothetical): in the request's namespace, created `now`,
    a generateName filled in, without what the server assigns; a pod pending, a PodGroup without
    a phase admitted (Inqueue: the engine leaves a Pending group to the enqueue step, and the
    question is what preemption would do for it)."""
    out = copy.deepcopy(dict(obj))
    meta = out.get("metadata")
    meta = dict(meta) if isinstance(meta, Mapping) else {}
    meta["namespace"] = namespace
    if not meta.get("name"):
        meta["name"] = f"{meta.get('generateName') or ''}{GENERATED_SUFFIX}"
    meta["creationTimestamp"] = now
    for server_field in ("uid", "resourceVersion", "deletionTimestamp"):
        meta.pop(server_field, None)
    out["metadata"] = meta
    if kind == "Pod":
        out["status"] = {"phase": "Pending"}
    else:
        status = out.get("status")
        phase = status.get("phase") if isinstance(status, Mapping) else None
        out["status"] = {"phase": str(phase or Phase.INQUEUE)}
    return out


def shown(name: str) -> str:
    """A name as the warning shows it: plain when kube-apiserver could have stored it, else quoted."""
    return name if _PLAIN_NAME.match(name) else json.dumps(name)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def warning(outcome: Outcome, what: str = "pod") -> str | None:
    """The warning for the engine's outcome for the object (`what`: "pod" or "PodGroup"), None
    when it fits without preemption or is not a preemptor at all (bound to a node, gated, a
    member its PodGroup decides for)."""
    if outcome.status == "preempt":
        victims = outcome.victims
        if not victims:
            return None
        namespaces = sorted({v.namespace for v in victims})
        listed = ", ".join(shown(n) for n in namespaces[:MAX_NAMESPACES])
        if len(namespaces) > MAX_NAMESPACES:
            listed += f" and {len(namespaces) - MAX_NAMESPACES} more"
        where = f"{'namespace' if len(namespaces) == 1 else 'namespaces'} {listed}"
        highest = max(v.priority for v in victims)
        text = (
            f"{PREFIX} placing this {what} would preempt {_plural(len(victims), 'pod')} in {where}"
            f" (highest priority {highest})"
        )
    elif outcome.status == "unresolved" and outcome.reason not in NOT_A_PREEMPTOR:
        text = f"{PREFIX} this {what} would stay pending: {outcome.reason}"
    else:
        return None
    return text if len(text) <= MAX_WARNING_CHARS else text[: MAX_WARNING_CHARS - 3] + "..."
