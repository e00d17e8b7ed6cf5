"""Through the real server: a request that waits for a thread has that wait taken off its
deadline (webhook/arrival.py), because kube-apiserver's timeout for the call was running all the
time. Before, the deadline was counted from when a thread took the request, so with every
thread in a long wait the queued requests were answered after kube-apiserver had given up."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from certs import issue_ca, issue_leaf, write_pem
from localcluster.procs import free_ports
from tests.builders import pod, review
from tests.serving import ROOT

SLEEP_SECONDS = 1.5
TIMEOUT_SECONDS = 5


@pytest.fixture
def slow_server(tmp_path: Path):
    ca = issue_ca()
    leaf = issue_leaf(ca, "priogate-test", ip_addresses=["127.0.0.1"], dns_names=["localhost"])
    write_pem(tmp_path / "ca.crt", ca.cert_pem)
    write_pem(tmp_path / "tls.crt", leaf.cert_pem)
    write_pem(tmp_path / "tls.key", leaf.key_pem, private=True)
    port = free_ports(1)[0]
    log = (tmp_path / "server.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.slow_rule_server",
            str(port),
            str(tmp_path / "tls.crt"),
            str(tmp_path / "tls.key"),
            str(SLEEP_SECONDS),
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    url = f"https://127.0.0.1:{port}/validate/slow?timeout={TIMEOUT_SECONDS}s"
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError((tmp_path / "server.log").read_text()[-3000:])
        try:
            urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=context, timeout=2)
        except urllib.error.HTTPError:
            break  # answering (404 from the test app): ready
        except OSError:
            time.sleep(0.1)
            continue
        break
    try:
        yield url, context
    finally:
        process.terminate()
        process.wait(20)
        log.close()


def _seconds_left(url: str, context: ssl.SSLContext, uid: str) -> float:
    request = urllib.request.Request(
        url,
        data=json.dumps(review(pod(uid, namespace="team"))).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, context=context, timeout=20) as response:
        message = json.load(response)["response"]["status"]["message"]
    return float(message.removeprefix("left="))


def test_time_queued_for_the_only_thread_counts_against_the_deadline(slow_server) -> None:
    url, context = slow_server
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(_seconds_left, url, context, "first")
        time.sleep(0.3)  # the first holds the only thread; the second queues behind it
        second = pool.submit(_seconds_left, url, context, "second")
        left = sorted([first.result(), second.result()], reverse=True)
    # Each handler ran SLEEP_SECONDS; the one that queued also waited about that long before.
    assert left[0] == pytest.approx(TIMEOUT_SECONDS - SLEEP_SECONDS, abs=0.4)
    assert left[1] < TIMEOUT_SECONDS - SLEEP_SECONDS - 0.8, left
