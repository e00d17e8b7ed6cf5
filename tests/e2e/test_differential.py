"""Differential test: every acceptance case of tests/data/priority-cases.yaml and
podgroup-priority-cases.yaml (native PodGroups), performed as real API requests, must give the
same outcome with upstream's built-in Priority plugin and with priogate in its place.

Runs, on the test run's control plane (kube-apiserver restarted with other flags in between):

  builtin           Priority plugin enabled, no priogate webhook at all (the reference)
  priogate          Priority plugin disabled, priogate registered (Fail, nothing exempt)
  builtin+priogate  both: the plugin enabled and priogate registered next to it (Ignore,
                    kube-system and priogate-system exempt), the other supported mode

Cases that need a ResourceQuota admission configuration run in a second pass of each run with
kube-apiserver started with that configuration (it would change the other cases' outcome).
The builtin run is also checked against the acceptance data itself, so the reference is real.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.rest import ApiException

from localcluster import ApiServerMode, LocalCluster
from localcluster.procs import progress
from localcluster.webhooks import PROBE_NAMESPACE
from tests.e2e.differential import CaseRunner, Outcome, expected_view, message_problems
from webhook.policy import WebhookPolicy

DATA = Path(__file__).resolve().parents[1] / "data"
ACCEPTANCE = yaml.safe_load((DATA / "priority-cases.yaml").read_text())
PODGROUP_ACCEPTANCE = yaml.safe_load((DATA / "podgroup-priority-cases.yaml").read_text())
assert PODGROUP_ACCEPTANCE["builtin_system_classes"] == ACCEPTANCE["builtin_system_classes"]
CASES = ACCEPTANCE["cases"] + PODGROUP_ACCEPTANCE["cases"]
CASE_IDS = [c["id"] for c in CASES]

# Deliberate, documented differences from upstream (only `upstream_gap: true` cases):
# case id -> (check of priogate's outcome, why).
DEVIATIONS: dict[str, tuple[Callable[[Outcome], bool], str]] = {
    "pc-deletecollection-removes-system-classes": (
        lambda o: (
            not o.allowed
            and o.status == 403
            and {"system-cluster-critical", "system-node-critical"} <= set(o.remaining or ())
        ),
        "priogate refuses every DELETE of a system class, and admission sees each item of a "
        "deletecollection: the request fails with 403 and the built-in classes survive (user classes "
        "may or may not be deleted before the refusal stops the collection; upstream deletes them all)",
    ),
}

RUNS = ("builtin", "priogate", "builtin+priogate")


def _admission_config(case: Mapping[str, Any]) -> str | None:
    config = case["preconditions"].get("admissionConfig")
    return json.dumps(config, sort_keys=True) if config else None


def _write_admission_config(directory: Path, config_json: str) -> Path:
    config = json.loads(config_json)
    plugins = []
    if "resourceQuota" in config:
        plugins.append(
            {
                "name": "ResourceQuota",
                "configuration": {
                    "apiVersion": "apiserver.config.k8s.io/v1",
                    "kind": "ResourceQuotaConfiguration",
                    **config["resourceQuota"],
                },
            }
        )
    path = directory / f"admission-{hashlib.sha1(config_json.encode()).hexdigest()[:8]}.yaml"
    body = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration", "plugins": plugins}
    path.write_text(yaml.safe_dump(body))
    return path


def _probe_namespace_quota(core) -> None:
    """A quota covering the system classes in the probe namespace, so dry-run probes that name them
    pass ResourceQuota admission when limitedResources is configured."""
    body = {
        "metadata": {"name": "critical-pods"},
        "spec": {
            "hard": {"pods": "1000000000"},
            "scopeSelector": {
                "matchExpressions": [
                    {
                        "scopeName": "PriorityClass",
                        "operator": "In",
                        "values": ["system-node-critical", "system-cluster-critical"],
                    }
                ]
            },
        },
    }
    try:
        core.create_namespaced_resource_quota(PROBE_NAMESPACE, body)
    except ApiException as e:
        if e.status != 409:
            raise


@pytest.fixture(scope="module")
def outcomes(cluster: LocalCluster, api_client, core, admission) -> Iterator[dict[str, dict[str, Outcome]]]:
    assert cluster.webhooks is not None and cluster.etcd is not None
    _probe_namespace_quota(core)
    groups: dict[str | None, list[tuple[int, dict]]] = {}
    for i, case in enumerate(CASES):
        groups.setdefault(_admission_config(case), []).append((i, case))
    configs = {key: _write_admission_config(cluster.state_dir, key) if key else None for key in groups}
    results: dict[str, dict[str, Outcome]] = {run: {} for run in RUNS}
    hook = cluster.supervisor.get("webhook")
    default_mode = cluster.mode

    def switch(plugin: bool, config_key: str | None, policy: WebhookPolicy | None) -> None:
        # Configurations first, then the restart: kube-apiserver has read them before it answers.
        if policy is None:
            cluster.webhooks.unregister()
        else:
            cluster.webhooks.register(policy)
        mode = ApiServerMode(priority_plugin=plugin, admission_config=configs[config_key])
        if mode != cluster.mode:
            seconds = cluster.restart_apiserver(mode)
            progress(f"kube-apiserver restarted in {seconds:.1f} s")
        if policy is not None:
            cluster.webhooks.probe(priority_plugin=plugin, proc=hook)

    def run(name: str, config_key: str | None) -> None:
        runner = CaseRunner(
            api_client, cluster.etcd, admission, ACCEPTANCE["builtin_system_classes"], tag=_tag(name)
        )
        t0 = time.monotonic()
        for i, case in groups[config_key]:
            results[name][case["id"]] = runner.run(case, i)
        which = "with an admission configuration" if config_key else "general"
        progress(f"run {name} ({which}): {len(groups[config_key])} cases in {time.monotonic() - t0:.1f} s")

    plugin_off = WebhookPolicy.for_mode(priority_plugin=False)
    plugin_on = WebhookPolicy.for_mode(priority_plugin=True)
    keys = list(groups)
    general = None if None in groups else keys[0]
    others = [k for k in keys if k != general]
    try:
        # Ordered to restart kube-apiserver as few times as possible.
        run("priogate", general)
        for key in others:
            switch(False, key, plugin_off)
            run("priogate", key)
        for key in [*others, general]:
            switch(True, key, None)
            run("builtin", key)
        for key in [general, *others]:
            switch(True, key, plugin_on)
            run("builtin+priogate", key)
        yield results
    finally:
        switch(default_mode.priority_plugin, None, plugin_off)
        CaseRunner(
            api_client, cluster.etcd, admission, ACCEPTANCE["builtin_system_classes"], tag="restore"
        ).reset_classes({"builtinSystemClasses": True, "priorityClasses": []})


def _tag(run: str) -> str:
    return {"builtin": "b", "priogate": "p", "builtin+priogate": "bp"}[run]


def _outcome(outcomes: Mapping[str, Mapping[str, Outcome]], run: str, case_id: str) -> Outcome:
    outcome = outcomes[run][case_id]
    if outcome.error:
        pytest.fail(f"[{run}] the harness could not perform {case_id}: {outcome.error}", pytrace=False)
    return outcome


def _subset(view: Mapping[str, Any], outcome: Outcome) -> dict[str, Any]:
    full = outcome.comparable()
    return {k: full[k] for k in view}


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_builtin_plugin_matches_the_acceptance_data(outcomes, case):
    outcome = _outcome(outcomes, "builtin", case["id"])
    expected = expected_view(case)
    assert _subset(expected, outcome) == expected, outcome.message
    if not case["expected"]["allowed"]:
        assert not message_problems(case, outcome.message), outcome.message


@pytest.mark.parametrize("run", ["priogate", "builtin+priogate"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_priogate_gives_the_builtin_outcome(outcomes, case, run):
    reference = _outcome(outcomes, "builtin", case["id"])
    outcome = _outcome(outcomes, run, case["id"])
    if case["id"] in DEVIATIONS:
        check, why = DEVIATIONS[case["id"]]
        assert case.get("upstream_gap"), "only upstream gaps may deviate"
        assert check(outcome), (
            f"documented deviation not met ({why}): {outcome.comparable()} {outcome.message}"
        )
        return
    detail = (
        f"\n  builtin : {reference.comparable()} {reference.message or ''}\n  {run}: {outcome.message or ''}"
    )
    assert outcome.comparable() == reference.comparable(), detail
    if not case["expected"]["allowed"]:
        assert not message_problems(case, outcome.message), outcome.message
