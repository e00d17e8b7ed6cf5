"""hack/upstream/run.py's verdict: which specs are in the focus, which may be skipped and why
(skips.yaml), and what ginkgo's JSON report says of each; printed so that CI's log alone says
what failed, and where, and which pod waited."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# What issue 14 asks for: every SchedulerPreemption test and the ResourceQuota tests that scope
# quota by PriorityClass. Ginkgo matches these against the spec's full text (containers and leaf).
FOCUS = (
    r"\[sig-scheduling\] SchedulerPreemption",
    r"\[sig-api-machinery\] ResourceQuota \[Feature:PodPriority\]",
)
MODE_TITLES = {
    "default": "kube-scheduler preempts single pods",
    "priogate": "--preemptor=priogate (kube-scheduler preempts through priogate's extender)",
}
# The event lines kept of a failed spec (scheduling_events).
EVENT_LINES = 25


@dataclass(frozen=True)
class Skip:
    pattern: str
    reason: str

    def matches(self, name: str) -> bool:
        return re.search(self.pattern, name) is not None


def load_skips(path: Path) -> list[Skip]:
    doc = yaml.safe_load(path.read_text()) or {}
    skips = []
    for i, entry in enumerate(doc.get("skips") or []):
        pattern, reason = entry.get("test"), entry.get("reason")
        if not pattern or not reason or not str(reason).strip():
            raise SystemExit(f"error: {path}: entry {i} needs both `test` (a pattern) and `reason`")
        re.compile(pattern)
        skips.append(Skip(pattern, " ".join(str(reason).split())))
    return skips


@dataclass(frozen=True)
class Outcome:
    name: str
    state: str  # passed | failed | skipped (ginkgo's states folded, see outcomes())
    message: str
    seconds: float
    attempts: int = 1  # > 1: it failed first and passed on a retry (FLAKE_ATTEMPTS)
    events: tuple[str, ...] = ()  # the framework's event dump of a failed spec, filtered


def spec_name(spec: dict[str, Any]) -> str:
    parts = [*(spec.get("ContainerHierarchyTexts") or []), spec.get("LeafNodeText", "")]
    return " ".join(p for p in parts if p)


def scheduling_events(output: str, limit: int = EVENT_LINES) -> tuple[str, ...]:
    """The last `limit` lines of the event dump upstream's framework writes for a failed spec's
    namespace (test/e2e/framework/debug/dump.go: "At TIME - event for POD: {SOURCE} REASON:
    MESSAGE"): which pod waited, and why, once CI's work tree is gone."""
    lines = [line.split("] ", 1)[-1].strip() for line in output.splitlines() if " - event for " in line]
    return tuple(lines[-limit:])


def outcomes(report_file: Path) -> tuple[list[Outcome], list[Outcome]]:
    """(specs in the focus, failed suite-level nodes) from ginkgo's --json-report. The report also
    holds every spec of the binary the focus filtered out (as skipped); those are dropped here."""
    suites = json.loads(report_file.read_text())
    focus = re.compile("|".join(FOCUS))
    specs: list[Outcome] = []
    suite_failures: list[Outcome] = []
    for suite in suites:
        for spec in suite.get("SpecReports") or []:
            state = spec.get("State", "")
            failure = spec.get("Failure") or {}
            message = str(failure.get("Message", "")).strip()
            where = failure.get("Location") or {}
            if where.get("FileName"):
                # where it failed in upstream's test source, the first thing to read
                message += f"\nat {where['FileName']}:{where.get('LineNumber', '?')}"
            seconds = (spec.get("RunTime") or 0) / 1e9
            if spec.get("LeafNodeType") != "It":
                # BeforeSuite, ReportAfterSuite, ...: a failure there fails the run
                if state not in ("passed", "skipped", "pending"):
                    name = f"[{spec.get('LeafNodeType')}] {spec.get('LeafNodeText', '')}".strip()
                    suite_failures.append(Outcome(name, "failed", message, seconds))
                continue
            name = spec_name(spec)
            if not focus.search(name):
                continue
            # ginkgo's failed, panicked, interrupted, aborted, timedout all count as failed
            folded = state if state in ("passed", "skipped") else "failed"
            attempts = int(spec.get("NumAttempts") or 1)
            events = scheduling_events(str(spec.get("CapturedGinkgoWriterOutput") or ""))
            specs.append(Outcome(name, folded, message, seconds, attempts, events))
    return specs, suite_failures


def summarize(report_file: Path, skips: list[Skip], e2e_exit: int, mode: str) -> int:
    print(f"upstream e2e, mode {mode}: {MODE_TITLES[mode]}")
    if not report_file.is_file():
        print(f"error: e2e.test wrote no report ({report_file}); it exited {e2e_exit}", file=sys.stderr)
        print("upstream e2e: 0 passed, 1 failed")
        print("FAILED: the e2e.test run itself (no report)")
        return 1
    specs, suite_failures = outcomes(report_file)
    failed: list[Outcome] = list(suite_failures)
    passed = 0
    retried: list[Outcome] = []
    listed: list[tuple[Outcome, Skip]] = []
    for o in specs:
        skip = next((s for s in skips if s.matches(o.name)), None)
        if o.state == "passed" and o.attempts > 1:
            passed += 1
            retried.append(o)
            print(f"FLAKY    {o.name} (passed on attempt {o.attempts}; the failed ones are in e2e.log)")
        elif o.state == "passed":
            passed += 1
            print(f"passed   {o.name} ({o.seconds:.0f} s)")
        elif o.state == "skipped" and skip is not None:
            listed.append((o, skip))
            print(f"skipped  {o.name}\n         reason: {skip.reason}")
        elif o.state == "skipped":
            # skipped at run time by the test itself: everything in the focus must run
            why = o.message.splitlines()[0] if o.message else "no message"
            message = f"skipped at run time, not listed in skips.yaml: {why}"
            failed.append(Outcome(o.name, "failed", message, 0))
            print(f"FAILED   {o.name} (skipped at run time: {why})")
        else:
            failed.append(o)
            print(f"FAILED   {o.name} ({o.seconds:.0f} s)")
    for f in suite_failures:
        print(f"FAILED   {f.name}")
    unused = [s for s in skips if not any(s.matches(o.name) for o in specs)]
    for s in unused:
        # a stale entry hides nothing today but would hide a test added later under that name
        failed.append(Outcome(f"skips.yaml entry {s.pattern!r}", "failed", "matches no test in the focus", 0))
        print(f"FAILED   skips.yaml entry {s.pattern!r} matches no test in the focus")
    if not specs:
        failed.append(Outcome("the focus", "failed", "matched no test", 0))
        print("FAILED   the focus matched no test")
    if e2e_exit != 0 and not failed:
        failed.append(Outcome("e2e.test", "failed", f"exited {e2e_exit} with every test passed", 0))
    print(f"skipped {len(listed)} (listed in hack/upstream/skips.yaml with their reasons)")
    on_retry = f" ({len(retried)} on a retry)" if retried else ""
    print(f"upstream e2e: {passed} passed{on_retry}, {len(failed)} failed")
    for f in failed:
        print(f"FAILED: {f.name}")
        lines = f.message.splitlines()
        # the message's head (ginkgo's, e.g. "Timed out after 120.000s. Expected Pod to be in
        # Running", before any object dump) and the location; the rest is in e2e.log
        for line in [*lines[:3], *(lines[-1:] if len(lines) > 3 else [])]:
            print(f"    {line}")
        if f.events:
            print("    the namespace's last events:")
            for line in f.events:
                print(f"      {line}")
    if failed:
        print(f"(e2e.test's full output: {report_file.parent / 'e2e.log'})")
    return 1 if failed else 0
