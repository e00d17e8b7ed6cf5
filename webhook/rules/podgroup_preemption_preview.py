"""Validating Volcano PodGroup dry-run CREATEs: the preemption preview (webhook/rules/
preemption_preview.py, the same handler), in a hook of its own so that each hook's rules match
one resource."""

from __future__ import annotations

from priogate import podgroup
from webhook.rules.preemption_preview import VOLCANO_GROUP, VOLCANO_VERSION, preview_rule_set

RULE_SET = preview_rule_set(
    "podgroup-preemption-preview.priogate.io",
    "/validate/podgroup-preemption-preview",
    VOLCANO_GROUP,
    VOLCANO_VERSION,
    podgroup.PLURAL,
)
