"""The local control plane proves each registered hook is called with a dry-run request for its
(API group, resource); every rule set needs one, and the two podgroups resources (Volcano-schema
and native) need one each."""

from __future__ import annotations

from localcluster.webhooks import PROBES
from webhook.registry import load_rule_sets


def test_every_hooked_resource_has_a_probe():
    hooked = {(g, res) for r in load_rule_sets() for g in r.api_groups for res in r.resources}
    assert hooked <= set(PROBES)


def test_each_probe_is_sent_to_its_own_api_group():
    for (group, resource), probes in PROBES.items():
        assert probes
        for path, body in probes:
            assert path.startswith("/api/v1/" if group == "" else f"/apis/{group}/"), path
            assert path.endswith(f"/{resource}")
            assert body["apiVersion"].startswith(f"{group}/" if group else "v1")
