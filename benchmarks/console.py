"""Page-load times of the memory console (issue 27) against a sidecar holding N memories.

Usage (from the repository root)::

    python benchmarks/console.py [--n 100000] [--repeats 20] [--json out.json]

Starts ``memevo serve --embedder local --console-listen 127.0.0.1:0 --sweep-interval-s 0`` on a fresh data
directory, writes ``--n`` memories over gRPC (RememberBatch of 10,000, random 384-d client vectors, text from
templates, four namespaces, a mix of kinds, 10 % keyed facts over 25 user keys so that most are superseded),
runs one Govern, waits until the console's change-log digest has read the whole log (its time is reported: the
overview's history charts fill in as it reads), then times each page's HTML and its API call ``--repeats`` times over
loopback HTTP, one after another, as a browser loading the page would: the HTML (static), then
``/api/overview`` (GetStats, GetPolicy, the digest's time series aggregated in NumPy, values of a sample of
400 memories per kind read by Get), ``/api/search`` (a Recall), ``/api/life`` (History of the first written
memory's fact key, superseded many times), ``/api/review`` (an observing Review stream), ``/api/entities`` (the
first page: ListEntities of that memory's namespace) and ``/api/beliefs`` (that memory's entity: Beliefs, its
keyed city among the entity's facts in the namespace, most superseded). Reported: median
and p95 per request. A page's load is its HTML plus its API call (the browser's rendering, a few ms for these
pages, is not included). Every API call carries the console's own token (from the ready file's ``console_url``): a
sidecar without tokens gets one since issue 41, and checking it is part of each timed request.
Not a test: nothing asserts on time; the target (≤ 300 ms at 1M memories) is printed beside the figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

from memevo.client import MemoryClient
from memevo.v1 import memory_pb2, memory_service_pb2

try:
    from benchmarks.machine import machine
except ImportError:  # run as a script: the repository root is not on sys.path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.machine import machine

DIM = 384
TARGET_MS = 300.0
NAMESPACES = ("default", "team-a", "team-b", "ops")
KINDS = (
    memory_pb2.MEMORY_KIND_EPISODE,
    memory_pb2.MEMORY_KIND_EPISODE,
    memory_pb2.MEMORY_KIND_FACT,
    memory_pb2.MEMORY_KIND_PREFERENCE,
    memory_pb2.MEMORY_KIND_STRATEGY,
)
WORDS = [
    "deploy",
    "upload",
    "billing",
    "search",
    "cache",
    "vega",
    "orion",
    "lisbon",
    "porto",
    "tea",
    "coffee",
    "retry",
    "flag",
    "cluster",
]


def items(n: int, seed: int, keys: int) -> list[memory_pb2.MemoryInput]:
    """``n`` memories; every tenth a fact ``city`` of one of ``keys`` users. Drawn in NumPy, not per item."""
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    words = np.array(WORDS)[rng.integers(0, len(WORDS), size=(n, 4))]
    users = rng.integers(0, keys, size=n)
    out = []
    for i in range(n):
        item = memory_pb2.MemoryInput(
            content=f"Note {i}: {' '.join(words[i])}.",
            vector=vectors[i].tobytes(),
            namespace=NAMESPACES[i % len(NAMESPACES)],
            kind=KINDS[i % len(KINDS)],
        )
        if i % 10 == 0:
            key = int(users[i])
            item.kind = memory_pb2.MEMORY_KIND_FACT
            item.entity = f"user:u{key}"
            item.fact.attribute = "city"
            item.fact.value = f"city {i}"
            item.content = f"User u{key} lives in city {i}."
        out.append(item)
    return out


def fetch(url: str, secret: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(authorized(url, secret), timeout=60) as response:
        response.read()
    return (time.perf_counter() - started) * 1e3


def authorized(url: str, secret: str) -> urllib.request.Request:
    """A request with the console's own token: the sidecar runs without tokens, so the console has one (issue 41)."""
    return urllib.request.Request(url, headers={"Authorization": f"Bearer {secret}"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="memevo-console-bench-"))
    ready = root / "ready.json"
    sock = root / "memevo.sock"
    log = (root / "serve.log").open("wb")
    serve = subprocess.Popen(
        [sys.executable, "-m", "memevo.sidecar.cli", "serve", "--data", str(root / "data"), "--listen",
         f"unix://{sock}", "--embedder", "local", "--console-listen", "127.0.0.1:0", "--sweep-interval-s", "0",
         "--max-fresh-tail", str(max(args.n, 100_000)), "--ready-file", str(ready)],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        while not ready.exists():
            if serve.poll() is not None:
                raise SystemExit((root / "serve.log").read_text())
            time.sleep(0.1)
        written = json.loads(ready.read_text())
        console = f"http://{written['console']}"
        secret = parse_qs(urlsplit(written["console_url"]).query)["token"][0]
        client = MemoryClient(f"unix://{sock}", timeout_s=600)
        started = time.perf_counter()
        # Batches of the sidecar's most (--max-batch-items 10,000); the next batch is drawn on a second thread
        # while the sidecar writes this one. Fact keys: 25 users per 5,000 memories' numbering, as before.
        batch = 10_000
        keys = max(min(args.n, 5_000) // 200, 1)
        starts = list(range(0, args.n, batch))
        key: memory_pb2.MemoryInput | None = None
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(items, min(batch, args.n), args.seed, keys)
            for number, start in enumerate(starts):
                chunk = pending.result()
                if number + 1 < len(starts):
                    following = starts[number + 1]
                    pending = pool.submit(items, min(batch, args.n - following), args.seed + following, keys)
                if key is None:
                    key = chunk[0]
                client._stub.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=chunk), timeout=600)
                if (start + len(chunk)) % 100_000 == 0 or start + len(chunk) == args.n:
                    print(f"written {start + len(chunk)} in {time.perf_counter() - started:.0f} s", flush=True)
        write_s = time.perf_counter() - started
        client._stub.Govern(memory_service_pb2.GovernRequest(), timeout=600)
        stats = client._stub.GetStats(memory_service_pb2.GetStatsRequest(), timeout=60)
        started = time.perf_counter()
        while True:
            with urllib.request.urlopen(authorized(f"{console}/api/overview", secret), timeout=60) as response:
                cursor = json.loads(response.read())["log"]["cursor"]
            if cursor >= stats.last_sequence:
                break
            time.sleep(0.5)
        digest_s = time.perf_counter() - started
        assert key is not None
        pages = {
            "html": f"{console}/",
            "overview": f"{console}/api/overview",
            "search": f"{console}/api/search?q=retry+the+deploy+on+vega&ns=default&k=10",
            "life": f"{console}/api/life?ns={key.namespace}&entity={key.entity.replace(':', '%3A')}&attribute=city",
            "review": f"{console}/api/review",
            "entities": f"{console}/api/entities?ns={key.namespace}",
            "beliefs": f"{console}/api/beliefs?ns={key.namespace}&entity={key.entity.replace(':', '%3A')}",
        }
        timings: dict[str, list[float]] = {name: [] for name in pages}
        for _ in range(args.repeats):
            for name, url in pages.items():
                timings[name].append(fetch(url, secret))
        report: dict[str, Any] = {
            "benchmark": "console page load",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv),
            "machine": machine(),
            "memories": int(stats.total_count),
            "log_events": int(stats.last_sequence),
            "write_s": round(write_s, 1),
            "digest_catch_up_s": round(digest_s, 1),
            "graph_vectors": int(stats.index.indexed_count),
            "fresh_tail_vectors": int(stats.index.fresh_tail_count),
            "ms": {
                name: {
                    "median": round(statistics.median(v), 1),
                    "p95": round(sorted(v)[max(0, math.ceil(len(v) * 0.95) - 1)], 1),
                }
                for name, v in timings.items()
            },
        }
        html = report["ms"]["html"]["median"]
        print(f"memories {report['memories']}, log events {report['log_events']}, written in {write_s:.1f} s, "
              f"digest caught up {digest_s:.1f} s after the last write")  # fmt: skip
        print(f"{'request':<10} {'median ms':>10} {'p95 ms':>8} {'page (html + api) ms':>22}   target {TARGET_MS:.0f}")
        for name, figures in report["ms"].items():
            page = figures["median"] + (html if name != "html" else 0.0)
            print(f"{name:<10} {figures['median']:>10.1f} {figures['p95']:>8.1f} {page:>22.1f}")
        if args.json:
            args.json.write_text(json.dumps(report, indent=2) + "\n")
        client.close()
    finally:
        serve.terminate()
        serve.wait(timeout=120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
