"""The ``memevo`` command: serve a data directory, run the demo, inspect a data directory."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from types import FrameType

from .config import GovernanceConfig, Limits, SidecarConfig, default_data_dir, default_listen
from .embedding import EmbedderConfig
from .errors import MemevoError

log = logging.getLogger("memevo")

TOKEN_ENV = "MEMEVO_TOKEN"
SIGNAL_POLL_S = 0.1


def _add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=default_data_dir(), help="data directory (default: %(default)s)")
    parser.add_argument(
        "--listen",
        action="append",
        default=None,
        help="unix:///abs/path.sock or host:port; repeat for several (default: a unix socket in $XDG_RUNTIME_DIR)",
    )
    parser.add_argument(
        "--embedder",
        choices=("local", "openai", "none"),
        default="local",
        help="local: the bundled all-MiniLM-L6-v2 (offline); openai: an OpenAI-compatible endpoint; "
        "none: clients send vectors",
    )
    parser.add_argument(
        "--openai-url",
        default="",
        help="base URL of the OpenAI-compatible API, e.g. http://127.0.0.1:8080/v1",
    )
    parser.add_argument("--openai-model", default="", help="embedding model name for --embedder openai")
    parser.add_argument(
        "--dimension",
        type=int,
        default=0,
        help="vector dimension of a new data directory with --embedder none",
    )
    parser.add_argument("--max-content-bytes", type=int, default=Limits().max_content_bytes)
    parser.add_argument("--max-batch-items", type=int, default=Limits().max_batch_items)
    parser.add_argument(
        "--max-future-skew-s",
        type=float,
        default=Limits().max_future_skew_s,
        help="how far in the future a memory's valid_from may be, seconds (default: %(default)s)",
    )
    parser.add_argument("--workers", type=int, default=32, help="gRPC worker threads (default: %(default)s)")
    parser.add_argument(
        "--sweep-interval-s",
        type=float,
        default=GovernanceConfig().sweep_interval_s,
        help="seconds between governance sweeps; 0 = only on Govern (default: %(default)s)",
    )
    parser.add_argument(
        "--checkpoint-interval-s",
        type=float,
        default=GovernanceConfig().checkpoint_interval_s,
        help="seconds between checkpoints of access statistics (default: %(default)s)",
    )
    parser.add_argument("--grace-s", type=float, default=5.0, help="shutdown grace period, seconds")
    parser.add_argument(
        "--token-file", type=Path, default=None, help=f"require this bearer token (or set ${TOKEN_ENV})"
    )
    parser.add_argument("--ready-file", type=Path, default=None, help="write JSON {pid, listen} here once serving")


def config_from_args(args: argparse.Namespace) -> SidecarConfig:
    """The SidecarConfig the command-line arguments describe."""
    embedder = EmbedderConfig(kind=args.embedder, openai_url=args.openai_url, openai_model=args.openai_model)
    limits = Limits(
        max_content_bytes=args.max_content_bytes,
        max_batch_items=args.max_batch_items,
        max_future_skew_s=args.max_future_skew_s,
    )
    return SidecarConfig(
        data_dir=args.data,
        listen=tuple(args.listen or [default_listen()]),
        embedder=embedder,
        dimension=args.dimension,
        limits=limits,
        workers=args.workers,
        governance=GovernanceConfig(
            sweep_interval_s=args.sweep_interval_s, checkpoint_interval_s=args.checkpoint_interval_s
        ),
        grace_s=args.grace_s,
        ready_file=args.ready_file,
    )


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file is not None:
        return args.token_file.read_text().strip() or None
    return os.environ.get(TOKEN_ENV) or None


def serve(args: argparse.Namespace) -> int:
    """Run a sidecar until SIGTERM or SIGINT."""
    from .service.server import Sidecar

    sidecar = Sidecar(config_from_args(args), token=_token(args))
    signals: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # Only note it: stopping takes locks the interrupted main thread may hold.
        signals.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sidecar.start()
    while not signals:
        time.sleep(SIGNAL_POLL_S)
    log.info("signal %d: shutting down", signals[0])
    sidecar.stop()
    return 0


def inspect(args: argparse.Namespace) -> int:
    """Print counts by state and kind, schema version, embedder and index status of a data directory."""
    from memevo.v1 import memory_pb2

    from .store.rocks import CF_MEMORIES, META_EMBEDDER, META_SCHEMA, RocksStore
    from .store.vector_index import INDEX_FILE, INDEX_META_FILE

    data: Path = args.data_dir
    if not (data / "rocksdb").is_dir():
        print(f"{data} is not a memevo data directory (no rocksdb/ inside)", file=sys.stderr)
        return 2
    store = RocksStore(data, dimension=0, embedder_identity="none")
    try:
        counts: Counter[tuple[str, str]] = Counter()
        record = memory_pb2.Memory()
        for _, raw in store.iterate(CF_MEMORIES):
            record.ParseFromString(raw)
            counts[(memory_pb2.MemoryState.Name(record.state), memory_pb2.MemoryKind.Name(record.kind))] += 1
        schema = (store.meta(META_SCHEMA) or b"?").decode()
        embedder = (store.meta(META_EMBEDDER) or b"?").decode()
        index_meta = data / INDEX_META_FILE
        saved = json.loads(index_meta.read_text()) if index_meta.exists() and (data / INDEX_FILE).exists() else None
        report: dict[str, object] = {
            "data_dir": str(data),
            "schema_version": int(schema) if schema.isdigit() else schema,
            "embedder": embedder,
            "dimension": store.dimension,
            "memories": sum(counts.values()),
            "by_state_and_kind": {f"{s}/{k}": n for (s, k), n in sorted(counts.items())},
            "next_id": store.next_id,
            "last_sequence": store.last_sequence,
            "index": (
                {
                    "saved_count": saved["count"],
                    "saved_sequence": saved["sequence"],
                    "behind_by_events": store.last_sequence - int(saved["sequence"]),
                }
                if saved
                else "missing: rebuilt from RocksDB at the next start"
            ),
        }
    finally:
        store.close()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for name, entry in report.items():
            if isinstance(entry, dict):
                print(f"{name}:")
                for inner, amount in entry.items():
                    print(f"  {inner}: {amount}")
            else:
                print(f"{name}: {entry}")
    return 0


def demo(args: argparse.Namespace) -> int:
    """Start a sidecar on a temporary directory and run a short scripted agent session against it."""
    from .demo import run_demo

    if not args.verbose:
        logging.getLogger().setLevel(logging.WARNING)  # the demo prints its own story
    return int(run_demo(embedder=args.embedder))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``memevo`` command."""
    parser = argparse.ArgumentParser(prog="memevo", description="A gRPC sidecar that governs LLM-agent memory.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="serve a data directory over gRPC")
    _add_serve_arguments(serve_parser)
    serve_parser.set_defaults(run=serve)
    demo_parser = commands.add_parser("demo", help="run a scripted agent session against a temporary sidecar")
    demo_parser.add_argument("--embedder", choices=("local", "none"), default="local")
    demo_parser.set_defaults(run=demo)
    inspect_parser = commands.add_parser("inspect", help="print what a data directory holds (sidecar stopped)")
    inspect_parser.add_argument("data_dir", type=Path)
    inspect_parser.add_argument("--json", action="store_true", help="print JSON")
    inspect_parser.set_defaults(run=inspect)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``memevo`` console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.run(args))
    except MemevoError as error:
        print(f"memevo: {error.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
