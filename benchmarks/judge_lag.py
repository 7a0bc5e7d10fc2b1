"""The pair judge off the write path: write latency with and without it, its lag and its throughput at a write rate.

Usage (from the repository root)::

    python benchmarks/judge_lag.py [--writes 1500] [--rates 10,25,50] [--json out/judge_lag.json]

For each rate, two ``memevo serve --embedder local`` processes one after the other on fresh data directories, one
``--judge none`` and one ``--judge local``, each written the same stream of text statements (``Remember`` one at a
time, kind FACT, about ``--entities`` entities, so that each write has up to four same-entity candidates for the
judge) at the target rate in turn, paced from ``--callers`` client threads. Per rate and sidecar: the achieved
rate, client-side
write latency p50 / p99, and for the judge: pairs judged, the model's seconds per pair, the lag from a write's
durability to its pairs settled (p50 / p99 of the latest 4,096, from the sidecar's Prometheus metrics), the time
the queue takes to drain after the last write, and pairs dropped (queue full). The statements are generated (a
speed benchmark: what they say matters only for how many candidates each write has).

Prints a table; ``--json PATH`` writes the rows with the machine and versions. Not a test: nothing asserts on time.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

try:
    from benchmarks.quality import common
except ImportError:  # run as a script: the repository root is not on sys.path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.quality import common

from memevo.client import MemoryClient, MemoryKind

NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jun", "Kofi", "Lena")
PLACES = ("Berlin", "Lisbon", "Toronto", "Osaka", "Nairobi", "Lima", "Oslo", "Austin", "Pune", "Hanoi")
EMPLOYERS = ("Shopify", "Canva", "Stripe", "Zalando", "Spotify", "Atlassian", "Klarna", "Wise", "Grab", "Mercado")
TEMPLATES = (
    "{name} works at {employer} now.",
    "{name} moved to {place} last month and likes it there.",
    "These days {name} is based in {place}.",
    "{name} left the old job and joined {employer} as a lead.",
    "{name} mentioned a weekend trip to {place} with friends.",
    "{name} prefers calls in the morning before ten.",
    "{name} is learning to cook and tried a new recipe from {place}.",
)
SAMPLE = re.compile(r"^(memevo_judge_\w+)(?:\{quantile=\"([0-9.]+)\"\})? (\S+)$")


def statements(count: int, entities: int, seed: int) -> list[tuple[str, str]]:
    """``count`` (text, entity) pairs over ``entities`` entities."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        who = int(rng.integers(entities))
        name = f"{NAMES[who % len(NAMES)]} {who}"
        template = TEMPLATES[int(rng.integers(len(TEMPLATES)))]
        text = template.format(
            name=name, place=PLACES[int(rng.integers(len(PLACES)))], employer=EMPLOYERS[int(rng.integers(10))]
        )
        out.append((text, f"person:{who}"))
    return out


def judge_metrics(address: str) -> dict[str, float]:
    """The sidecar's ``memevo_judge_*`` samples (quantiles as ``name@q``)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match is not None:
            name, quantile, value = match.groups()
            out[f"{name}@{quantile}" if quantile else name] = float(value)
    return out


def write_at(
    client: MemoryClient, items: Sequence[tuple[str, str]], namespace: str, rate: float, callers: int
) -> tuple[float, list[float]]:
    """Write ``items`` paced at ``rate`` a second from ``callers`` threads; (seconds taken, latencies in ms)."""
    latencies: list[float] = []
    lock = threading.Lock()
    start = time.perf_counter()

    def run(offset: int) -> None:
        for i in range(offset, len(items), callers):
            due = start + i / rate
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            text, entity = items[i]
            began = time.perf_counter()
            client.remember(text, namespace=namespace, kind=MemoryKind.FACT, entity=entity)
            with lock:
                latencies.append((time.perf_counter() - began) * 1e3)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, latencies


def drain_s(address: str, timeout_s: float) -> float:
    """Seconds until the judge's queue is empty (polled every 50 ms); ``timeout_s`` if it never is."""
    began = time.perf_counter()
    while time.perf_counter() - began < timeout_s:
        if judge_metrics(address).get("memevo_judge_pending_pairs", 0.0) == 0:
            return time.perf_counter() - began
        time.sleep(0.05)
    return timeout_s


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=1_500, help="writes per rate (default %(default)s)")
    parser.add_argument("--rates", default="10,25,50", help="target writes a second, comma-separated")
    parser.add_argument("--callers", type=int, default=4, help="client threads (default %(default)s)")
    parser.add_argument("--entities", type=int, default=60, help="entities written about (default %(default)s)")
    parser.add_argument("--drain-timeout-s", type=float, default=600.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    log = common.Log()
    rates = [float(r) for r in args.rates.split(",")]
    rows: list[dict[str, Any]] = []
    for number, rate in enumerate(rates):
        items = statements(args.writes, args.entities, seed=number)
        for judge in ("none", "local"):  # a fresh sidecar each: the lag quantiles cover this rate's writes only
            extra = ("--judge", judge, "--metrics-listen", "127.0.0.1:0")
            with common.sidecar(log=log, extra=extra) as running:
                ready = json.loads((running.data_dir.parent / "ready.json").read_text())
                address = str(ready["metrics"])
                before = judge_metrics(address)
                took, latencies = write_at(running.client, items, f"rate-{number}", rate, args.callers)
                drained = drain_s(address, args.drain_timeout_s) if judge == "local" else 0.0
                after = judge_metrics(address)
                pairs = after.get("memevo_judge_pairs_total", 0.0) - before.get("memevo_judge_pairs_total", 0.0)
                model_s = after.get("memevo_judge_model_seconds_total", 0.0) - before.get(
                    "memevo_judge_model_seconds_total", 0.0
                )
                row = {
                    "judge": judge,
                    "target_rate": rate,
                    "achieved_rate": len(items) / took,
                    "write_p50_ms": float(np.percentile(latencies, 50)),
                    "write_p99_ms": float(np.percentile(latencies, 99)),
                    "pairs": pairs,
                    "pairs_per_write": pairs / len(items),
                    "model_ms_per_pair": 1e3 * model_s / pairs if pairs else 0.0,
                    "lag_p50_s": after.get("memevo_judge_lag_seconds@0.5", 0.0),
                    "lag_p99_s": after.get("memevo_judge_lag_seconds@0.99", 0.0),
                    "drain_s": drained,
                    "dropped": after.get("memevo_judge_dropped_pairs_total", 0.0),
                }
                rows.append(row)
                log(
                    f"judge {judge} rate {rate:g}/s: {row['achieved_rate']:.1f}/s, write p50 {row['write_p50_ms']:.1f}"
                    f" p99 {row['write_p99_ms']:.1f} ms; {pairs:.0f} pairs, lag p99 {row['lag_p99_s']:.2f} s"
                )
    print(
        "| judge | target / achieved writes/s | write p50 / p99 ms | pairs a write | model ms a pair"
        " | lag p50 / p99 s | drain after last write s | dropped |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['judge']} | {r['target_rate']:g} / {r['achieved_rate']:.1f} | {r['write_p50_ms']:.1f} / "
            f"{r['write_p99_ms']:.1f} | {r['pairs_per_write']:.2f} | {r['model_ms_per_pair']:.1f} | "
            f"{r['lag_p50_s']:.2f} / {r['lag_p99_s']:.2f} | {r['drain_s']:.1f} | {r['dropped']:.0f} |"
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "command": common.command_line(argv),
            "machine": common.machine(),
            "versions": common.versions(),
            "rows": rows,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
