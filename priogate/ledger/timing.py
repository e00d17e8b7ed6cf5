"""Every time the ledger's turns depend on, in one place, each with why it is what it is.

Only IN_FLIGHT and FENCE_TTL bear on safety (docs/ledger.md, "The invariant"): an entry or a
fence is kept at least that long after it was written, so a request still on its way to storage
keeps counting. Every other constant here trades requests against latency and can be changed
without risk of over-admission: a turn that runs out of time answers "retry", never "yes".
"""

from __future__ import annotations

import datetime as dt

# --- Safety --------------------------------------------------------------------------------

# How long after priogate decided it a request may still be on its way to storage (or, for a pod,
# to the built-in ResourceQuota plugin's charge in status.used). kube-apiserver calls validating
# webhooks in parallel (k8s.io/apiserver pkg/admission/plugin/webhook/validating dispatcher.go)
# and stores the object once the last has answered and the ResourceQuota plugin has charged it,
# so after priogate's decision what remains is the slowest other validating webhook for the
# object plus the quota charge and the etcd write: milliseconds with priogate's own hooks. It is
# kept short because a forged CREATE (an endpoint without mTLS) holds its claim that long; an
# admission it would block waits meanwhile instead of failing. Raise it (--in-flight-seconds)
# above the timeoutSeconds of any other slow validating webhook for PodGroups or pods. Claims are
# stamped to the microsecond when decided; the margin covers clock skew between replicas.
IN_FLIGHT = dt.timedelta(seconds=5)

# How long a quota fence counts after its quota change was admitted: longer than kube-apiserver
# lets a write take after admission (its default --request-timeout is 60 s), plus a watch
# cache's lag, so the cache shows the change (or its absence) before the fence lapses.
FENCE_TTL = dt.timedelta(seconds=90)

# The longest a turn's write may take, from before its decisions to the API server's answer,
# for its admissions to be answered "yes": a claim is stamped when decided, so a slow write eats
# into the in-flight bound that the rest of the request's way to storage counts on. A write that
# lands later answers "busy, retry" (its entries then count until their bound, and lapse).
LATE_WRITE_SECONDS = 1.0

# --- Waiting for claims in flight (latency only) --------------------------------------------

# A claim admitted this recently and not yet in the watch cache is awaited through the cache (the
# next turn is taken when the cache changes), not a quorum LIST: admitted groups are stored and
# seen within milliseconds, and a LIST of every group per refusal is what the API server would
# spend most on at a full quota.
UNSEEN_GRACE = dt.timedelta(seconds=1)
# Between timed turns of an admission that waits for the fate of claims in flight.
AWAIT_POLL_SECONDS = 0.2
# Between looks at a watch cache's generation (a local check, no API call).
CHANGE_POLL_SECONDS = 0.005
# Kept back from the request's deadline while waiting, for a last turn and the answer's way back.
WAIT_MARGIN_SECONDS = 2.5
# The wait of a request that carries no deadline (offline mode, in-process tests).
DEFAULT_WAIT_SECONDS = 8.0

# --- Taking turns on the ledger (latency only) -----------------------------------------------

# The longest a request waits for its turn and write: inside the hooks' timeoutSeconds (10 s), so
# a turn that cannot finish answers "busy, retry" (429) before kube-apiserver gives up on it.
TURN_DEADLINE_SECONDS = 7.0
# Kept back from the caller's deadline for the answer to travel (and a last write to end).
ANSWER_MARGIN_SECONDS = 1.5
# (connect, read) seconds for one ledger call: well inside the turn's deadline, so a hung call
# becomes a retry or a "busy" answer, not a webhook timeout.
CALL_TIMEOUT = (3, 5)
# How often a request queued behind a batch looks whether its answer is in, or the turn is free.
TURN_POLL_SECONDS = 0.05
# Another writer whose write this process saw this recently is taken to be busy: a turn on top of
# the process's own last write first waits for that writer's next one.
OTHERS_ACTIVE_SECONDS = 0.1
# How long a turn waits for the watch to show the newest write: about two turns of another server
# under load (its write lands 10 to 25 ms after it began, the watch event a few ms later).
WATCH_WAIT_SECONDS = 0.05

# --- Relaying to the namespace's writer (latency only) ---------------------------------------

# A writer whose write on a namespace's ledger the watch showed this recently holds the
# namespace's turn: other replicas relay the namespace's admissions to it (webhook/ledger_relay.py).
# Longer than the gap between writes under load (tens of ms), short enough that an idle
# namespace's next admission is decided where it lands.
WRITER_FRESH_SECONDS = 2.0
# Connecting to the writer: replicas share a network, so a connection that does not open in this
# long is to a replica that has gone; the admission is then decided where it landed.
RELAY_CONNECT_SECONDS = 0.25
# After a relay to a writer failed, admissions are decided where they land for this long instead
# of trying that writer again, so a replica that went away costs one failed connection, not one
# per admission.
RELAY_BACKOFF_SECONDS = 2.0
