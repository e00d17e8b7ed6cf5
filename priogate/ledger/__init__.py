"""The PodGroup ledger: what a namespace's PodGroups reserve, kept so that no replica ever admits
more than the namespace's ResourceQuotas allow.

One ledger per tenant namespace, a ConfigMap `podgroup-ledger.<namespace>` in priogate's own
namespace, where tenants cannot write. It holds three kinds of item: entries (a PodGroup's claim:
minResources, minMember as pods, class), charges (a pod admitted a moment ago that its quota's
status.used may not show yet) and quota fences (a quota change admitted and perhaps not stored).

The invariant
-------------
At every successful write of a ledger, for each quota that applies (every cached ResourceQuota
and every live fence), the entries of stored groups, plus the entries still in flight, plus the
live charges, fit under its `hard`, per resource, among what its scope selects; and an entry is
dropped only on a quorum read (a LIST without resourceVersion) that began after its in-flight
bound had passed and does not hold its group.

Writes that claim nothing more (a shrink, a finalizer removal) are always made, so a quota
lowered below what is held keeps what is held and lets nothing grow.

Three turns write a ledger. Each is a pure function `decide(ledger, reads, clock, ask)` that
returns the ledger to write (or None) and an outcome (None: admitted, a refusal, or Awaiting):
- claim.decide: a PodGroup CREATE or UPDATE (webhook.rules.podgroup_quota);
- charge.decide: a pod CREATE or resize where groups reserve (webhook.rules.pod_quota);
- fences.decide: a ResourceQuota create or spec change (webhook.rules.quota_fence).
priogate.kube.ledger_store runs them: it reads the ledger (or rebuilds it from a quorum LIST when
it is missing or damaged), calls the turn, and writes with a resourceVersion precondition.

What keeps the invariant (safety)
---------------------------------
- The resourceVersion precondition on every write: a turn decided on a stale copy fails with 409
  and is decided again on a fresh GET, so all replicas and processes are serialized by the API
  server, as kube-apiserver's own ResourceQuota admission is through a quota's status.
- The in-flight bound (timing.IN_FLIGHT, --in-flight-seconds): an entry or a charge counts until
  its bound has passed, so a request still on its way to storage keeps its claim; entries are
  dropped only by a quorum LIST begun after that (settlement.resync).
- Quota fences (timing.FENCE_TTL): a quota change is in the ledger before kube-apiserver can
  store it, so a turn on a cache that has not seen the change still counts it.
- A missing or damaged ledger is rebuilt from a quorum LIST before any decision; it never reads
  as empty (codec.DamagedLedger).
- Stamps when decided, to the microsecond, never when the request arrived (a request that queued
  for its turn does not look older than it is); and an admission whose write landed later than
  timing.LATE_WRITE_SECONDS after its decision answers "retry", so the bound left for its way to
  storage is never eaten by a slow write.
- An admission covered by a claim still in flight restamps that claim (claim.decide), so each
  admission that may still be stored keeps its own bound.

What only saves time or requests (optimisation; none can cause an over-admission)
---------------------------------------------------------------------------------
- Starting a turn from the watch's copy when the turn stamps say it is current (turn_order,
  priogate.kube.watched_ledger); a stale copy costs a 409 and a GET.
- Batching a process's concurrent requests for a namespace into one read and one write
  (priogate.kube.ledger_store); a quota server is one process, so its requests never race each
  other.
- Early refusal when the groups the cache shows stored already leave no room: the turn would
  refuse the same. Their claims and per-class sums are kept by the watch's events
  (stored_claims), not rebuilt per admission.
- Running per-class sums moved by the entries each decision changed (totals).
- Waiting for claims in flight through the watch cache before a quorum LIST (timing.UNSEEN_GRACE).
- Sharded, compressed storage of the entries (codec).
- Relaying a namespace's admissions to the replica that holds its turn (webhook.ledger_relay),
  and asking kube-apiserver to connect again after a relay, so that its connections gather at
  that replica; a relay that fails is decided where it landed.
Every timing constant is in priogate.ledger.timing, with its reason.
"""
