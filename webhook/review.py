"""The AdmissionReview envelope: parse a request, build a response, JSON Patch helpers.

Everything here is pure. Malformed input raises BadReview, which the app turns into a 400 with
a one-line reason; it never reaches a rule set.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

SUPPORTED_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class BadReview(ValueError):
    """The body is not a usable AdmissionReview; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    uid: str
    api_version: str
    operation: str
    kind: Mapping[str, str]
    resource: Mapping[str, str]
    sub_resource: str
    name: str
    namespace: str
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None
    dry_run: bool
    user: Mapping[str, Any]
    options: Mapping[str, Any] | None = None
    # time.monotonic() by which kube-apiserver stops waiting (from its ?timeout= parameter);
    # rule sets that wait on the API server finish before it. None: no limit was given.
    deadline: float | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """A rule set's answer. `code` and `reason` only matter for denials."""

    allowed: bool
    message: str = ""
    code: int = 403
    reason: str = "Forbidden"
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def allow(patch: list[dict[str, Any]] | None = None, warnings: list[str] | None = None) -> Decision:
    return Decision(True, patch=patch or [], warnings=warnings or [])


def deny(message: str, *, code: int = 403, reason: str | None = None) -> Decision:
    if reason is None:
        reason = {400: "BadRequest", 403: "Forbidden", 409: "Conflict", 422: "Invalid"}.get(code, "Forbidden")
    return Decision(False, message=message, code=code, reason=reason)


def _require_mapping(value: object, what: str) -> Mapping[str, Any]:
    # Decoded JSON objects are exactly dict; the exact-type test is several times cheaper than
    # an isinstance check against the Mapping ABC, and this runs a dozen times per request.
    if type(value) is not dict:
        raise BadReview(f"{what} must be a JSON object")
    return value


def _optional_object(value: object, what: str) -> Mapping[str, Any] | None:
    if value is None:
        return None
    return _require_mapping(value, what)


def _string(value: object, what: str, *, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise BadReview(f"{what} must be a non-empty string" if required else f"{what} must be a string")
    return value


def parse_review(body: bytes, deadline: float | None = None) -> AdmissionRequest:
    """Decode an AdmissionReview body (admission.k8s.io/v1 or v1beta1)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise BadReview(f"body is not valid JSON: {e}") from None
    doc = _require_mapping(doc, "body")
    if doc.get("kind") != "AdmissionReview":
        raise BadReview(f"expected kind AdmissionReview, got {doc.get('kind')!r}")
    api_version = doc.get("apiVersion")
    if api_version not in SUPPORTED_VERSIONS:
        raise BadReview(
            f"unsupported apiVersion {api_version!r}; expected one of {', '.join(SUPPORTED_VERSIONS)}"
        )
    req = _require_mapping(doc.get("request"), "request")
    operation = _string(req.get("operation"), "request.operation", required=True)
    if operation not in OPERATIONS:
        raise BadReview(f"request.operation {operation!r} is not one of {', '.join(OPERATIONS)}")
    dry_run = req.get("dryRun", False)
    if dry_run is not None and type(dry_run) is not bool:
        raise BadReview("request.dryRun must be a boolean")
    return AdmissionRequest(
        uid=_string(req.get("uid"), "request.uid", required=True),
        api_version=api_version,
        operation=operation,
        kind=_require_mapping(req.get("kind") or {}, "request.kind"),
        resource=_require_mapping(req.get("resource") or {}, "request.resource"),
        sub_resource=_string(req.get("subResource"), "request.subResource"),
        name=_string(req.get("name"), "request.name"),
        namespace=_string(req.get("namespace"), "request.namespace"),
        object=_optional_object(req.get("object"), "request.object"),
        old_object=_optional_object(req.get("oldObject"), "request.oldObject"),
        dry_run=bool(dry_run),
        user=_require_mapping(req.get("userInfo") or {}, "request.userInfo"),
        options=_optional_object(req.get("options"), "request.options"),
        deadline=deadline,
    )


def review_response(request: AdmissionRequest, decision: Decision) -> dict[str, Any]:
    """The AdmissionReview to send back, in the request's own apiVersion."""
    response: dict[str, Any] = {"uid": request.uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {
            "status": "Failure",
            "code": decision.code,
            "reason": decision.reason,
            "message": decision.message,
        }
    elif decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(decision.patch)).decode()
    if decision.warnings:
        response["warnings"] = decision.warnings
    return {"apiVersion": request.api_version, "kind": "AdmissionReview", "response": response}


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m)$")


def caller_timeout(query_string: str) -> float | None:
    """Seconds from kube-apiserver's `timeout` query parameter (a Go duration such as `10s`;
    it sends whole seconds), or None when absent or not understood."""
    for part in query_string.split("&"):
        key, _, value = part.partition("=")
        if key == "timeout":
            m = _DURATION.match(value)
            if m:
                return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0}[m.group(2)]
    return None


# ---- JSON Patch (RFC 6902) helpers -------------------------------------------------------


def escape_pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def set_field(obj: Mapping[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """An op that sets `path` to `value` ("replace" if present, else "add"). The parent must exist."""
    parent: Any = obj
    for token in path[:-1]:
        parent = parent[token]
    op = "replace" if path[-1] in parent else "add"
    return {"op": op, "path": "/" + "/".join(escape_pointer(t) for t in path), "value": value}
