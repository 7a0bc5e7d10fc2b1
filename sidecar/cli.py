"""The ``memevo`` command: serve a data directory, run the demo, inspect a data directory."""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from .config import (
    GovernanceConfig,
    IndexConfig,
    Limits,
    LlmConfig,
    SidecarConfig,
    SnapshotConfig,
    TlsConfig,
    default_data_dir,
    default_listen,
)
from .console.cli import add_console_command, add_console_listen_argument
from .embedding import EmbedderConfig
from .errors import FailedPrecondition, MemevoError

if TYPE_CHECKING:
    from memevo.v1 import policy_pb2

    from .replay.replay import ReplayOptions

log = logging.getLogger("memevo")

TOKEN_ENV = "MEMEVO_TOKEN"
SIGNAL_POLL_S = 0.1


def _add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=default_data_dir(), help="data directory (default: %(default)s)")
    parser.add_argument(
        "--listen",
        action="append",
        default=None,
        help="unix:///abs/path.sock or host:port; repeat for several (default: unix://$XDG_RUNTIME_DIR/"
        f"memevo-UID.sock, or unix:///tmp/memevo-UID.sock when $XDG_RUNTIME_DIR is unset; here {default_listen()})",
    )
    parser.add_argument(
        "--embedder",
        choices=("local", "openai", "none"),
        default="local",
        help="local: the bundled all-MiniLM-L6-v2 (offline); openai: an OpenAI-compatible endpoint; "
        "none: clients send vectors (default: %(default)s)",
    )
    parser.add_argument(
        "--judge",
        choices=("local", "none"),
        default="none",
        help="local: the bundled pair model judges whether a prose statement replaces an older one (off the write "
        "path; it finds more changes and also retires more additions, see RESULTS.md); none: vector likeness alone "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--rerank",
        choices=("local", "none"),
        default="none",
        help="local: the bundled reranker reads a text Recall's best few candidates with the question and orders "
        "them by whether they answer it (a few ms a candidate); none: the ranking formula alone (default: %(default)s)",
    )
    parser.add_argument(
        "--openai-url",
        default="",
        help="base URL of the OpenAI-compatible API, e.g. http://127.0.0.1:8080/v1 (required by --embedder openai)",
    )
    parser.add_argument(
        "--openai-model", default="", help="embedding model name for --embedder openai (required with it)"
    )
    parser.add_argument(
        "--query-embed-batch",
        type=int,
        default=EmbedderConfig().query_batch_max,
        help="most recall query texts embedded in one model run when recalls arrive together; 0 = each alone "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--query-embed-cache",
        type=int,
        default=EmbedderConfig().query_cache_size,
        help="recent query texts whose vectors are kept; 0 = none (default: %(default)s)",
    )
    parser.add_argument(
        "--embed-threads",
        type=int,
        default=EmbedderConfig().threads,
        help="threads one local embedder run may use; 0 = min(2, CPUs) (default: %(default)s)",
    )
    parser.add_argument(
        "--llm-url",
        default="",
        help="base URL of an OpenAI-compatible chat-completions endpoint that writes abstractions and judges soft "
        "conflicts when the policy's consolidation mode is LLM, e.g. http://127.0.0.1:8080/v1 (API key from "
        "$MEMEVO_LLM_API_KEY; default: none)",
    )
    parser.add_argument("--llm-model", default="", help="chat model name for --llm-url (default: none)")
    parser.add_argument(
        "--llm-timeout-s",
        type=float,
        default=60.0,
        help="seconds one abstraction request may take (default: %(default)s)",
    )
    parser.add_argument(
        "--llm-judgements-per-write",
        type=_non_negative_float,
        default=1.0,
        help="budget of --llm-url's supersession judgements: this many per memory written since the start, after "
        "a first 20; a doubt past it waits for later writes (default: %(default)s)",
    )
    parser.add_argument(
        "--dimension",
        type=int,
        default=0,
        help="vector dimension of a new data directory with --embedder none (required then); 0 = the "
        "embedder's or the data directory's (default: %(default)s)",
    )
    parser.add_argument(
        "--max-content-bytes",
        type=int,
        default=Limits().max_content_bytes,
        help="UTF-8 bytes of one memory's content or one query; past it INVALID_ARGUMENT (default: %(default)s)",
    )
    parser.add_argument(
        "--max-batch-items",
        type=int,
        default=Limits().max_batch_items,
        help="memories in one RememberBatch or one stream message (default: %(default)s)",
    )
    parser.add_argument(
        "--max-memories",
        type=int,
        default=Limits().max_memories,
        help="most memories (not evicted) the data directory may hold; 0 = no limit (default: %(default)s)",
    )
    parser.add_argument(
        "--max-fresh-tail",
        type=int,
        default=Limits().max_fresh_tail,
        help="acknowledged vectors that may wait for the ANN graph; past it writes get RESOURCE_EXHAUSTED "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--max-future-skew-s",
        type=float,
        default=Limits().max_future_skew_s,
        help="how far in the future a memory's valid_from may be, seconds (default: %(default)s)",
    )
    parser.add_argument(
        "--workers", type=int, default=32, help="gRPC worker threads for unary calls and health (default: %(default)s)"
    )
    parser.add_argument(
        "--max-streams",
        type=int,
        default=SidecarConfig().max_streams,
        help="streams (Watch, Review, RememberStream) open at once, each on its own thread; more get "
        "RESOURCE_EXHAUSTED (default: %(default)s)",
    )
    parser.add_argument(
        "--max-streams-per-caller",
        type=int,
        default=SidecarConfig().max_streams_per_caller,
        help="streams one caller (token, else certificate, else connection) may hold open (default: %(default)s)",
    )
    parser.add_argument(
        "--max-unauthenticated-streams",
        type=int,
        default=SidecarConfig().max_unauthenticated_streams,
        help="health Watch streams without a valid token open at once (with tokens only); they never take "
        "--max-streams places (default: %(default)s)",
    )
    parser.add_argument(
        "--max-unauthenticated-streams-per-peer",
        type=int,
        default=SidecarConfig().max_unauthenticated_streams_per_peer,
        help="health Watch streams without a valid token one peer host may hold open (default: %(default)s)",
    )
    parser.add_argument(
        "--sweep-interval-s",
        type=float,
        default=GovernanceConfig().sweep_interval_s,
        help="seconds between governance sweeps; 0 = only on Govern (default: %(default)s)",
    )
    parser.add_argument(
        "--near-interval-s",
        type=float,
        default=GovernanceConfig().near_interval_s,
        help="seconds between sweeps of memories near a threshold (default: %(default)s)",
    )
    parser.add_argument(
        "--full-sweep-interval-s",
        type=float,
        default=GovernanceConfig().full_interval_s,
        help="seconds between sweeps of every memory, ARCHIVED ones included; 0 = never scheduled "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--sweep-every-writes",
        type=int,
        default=GovernanceConfig().sweep_every_writes,
        help="also sweep the ACTIVE tier after this many writes; 0 = by time only (default: %(default)s)",
    )
    parser.add_argument(
        "--sample-above",
        type=int,
        default=GovernanceConfig().sample_above_count,
        help="stores larger than this many memories are swept by rotating samples (default: %(default)s)",
    )
    parser.add_argument(
        "--checkpoint-interval-s",
        type=float,
        default=GovernanceConfig().checkpoint_interval_s,
        help="seconds between checkpoints of access statistics (default: %(default)s)",
    )
    parser.add_argument(
        "--index-save-interval-s",
        type=float,
        default=IndexConfig().save_interval_s,
        help="seconds between saves of the ANN index while it changes; also saved at shutdown (default: %(default)s)",
    )
    parser.add_argument(
        "--snapshot-every-changes",
        type=int,
        default=SnapshotConfig().every_changes,
        help="write the start-up snapshot in the background after this many changes, so that a start after a "
        "crash reads only the memories changed since; 0 = only at a clean stop (default: %(default)s)",
    )
    parser.add_argument(
        "--snapshot-max-age-s",
        type=float,
        default=SnapshotConfig().max_age_s,
        help="also write it when this many seconds passed since the last one and anything changed; 0 = by "
        "count only (default: %(default)s)",
    )
    parser.add_argument(
        "--index-build-rate",
        type=float,
        default=IndexConfig().build_rate_per_s,
        help="most vectors per second the index builder inserts, e.g. to leave the cores to requests during a "
        "rebuild after a crash; 0 = no cap (default: %(default)s)",
    )
    parser.add_argument(
        "--index-bulk-threads",
        type=int,
        default=IndexConfig().bulk_threads,
        help="threads the index builder may insert a backlog with (a bulk load, a rebuild), used while measured "
        "faster than one; 0 = one per core (default: %(default)s)",
    )
    parser.add_argument(
        "--index-bulk-call-s",
        type=_non_negative_float,
        default=IndexConfig().bulk_call_s,
        help="seconds one usearch add() call of a backlog is sized to take, about the longest a recall waits for "
        "the graph during a bulk load; 0 = 8 vectors a thread (default: %(default)s)",
    )
    parser.add_argument(
        "--index-expansion-search",
        type=_positive_int,
        default=IndexConfig().expansion_search,
        help="candidate list size of every ANN graph search (HNSW ef), the floor whatever the k: lower is faster "
        "and finds fewer of the true nearest; a memory stored with exactly the query's vector is found either way "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--entity-vectors-mib",
        type=int,
        default=IndexConfig().entity_vectors_mib,
        help="memory for entities' vectors held in one block each, so that a recall filtered by entity scores "
        "them without reading each one; 0 = none held (default: %(default)s)",
    )
    parser.add_argument(
        "--grace-s",
        type=float,
        default=5.0,
        help="seconds running calls may take to finish at shutdown (default: %(default)s)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help=f"a file holding one bearer token every call must carry, or set ${TOKEN_ENV}; an empty or "
        f"unreadable file, like an empty ${TOKEN_ENV}, stops the start (default: no token)",
    )
    parser.add_argument(
        "--tokens-file",
        type=Path,
        default=None,
        help="bearer tokens scoped to namespaces, one per line: '<token> <ns>[,<ns>...]' or '<token> *' "
        "(default: none)",
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow listen addresses beyond loopback (requires --tls-cert/--tls-key and tokens or --tls-client-ca)",
    )
    parser.add_argument(
        "--tls-cert", type=Path, default=None, help="PEM server certificate: TLS on every TCP address (default: none)"
    )
    parser.add_argument("--tls-key", type=Path, default=None, help="PEM private key of --tls-cert (default: none)")
    parser.add_argument(
        "--tls-client-ca",
        type=Path,
        default=None,
        help="PEM CA: require client certificates it signed (mutual TLS) (default: none)",
    )
    parser.add_argument(
        "--metrics-listen",
        default="",
        help="serve Prometheus metrics at http://HOST:PORT/metrics, loopback only, e.g. 127.0.0.1:9464 (default: off)",
    )
    add_console_listen_argument(parser)
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="log lines as text or JSON (with request ids) (default: %(default)s)",
    )
    parser.add_argument(
        "--ready-file",
        type=Path,
        default=None,
        help="write JSON {pid, listen} here once serving, for supervisors and tests (default: none)",
    )


def config_from_args(args: argparse.Namespace) -> SidecarConfig:
    """The SidecarConfig the command-line arguments describe."""
    if args.embedder == "openai":
        for flag, value in (("--openai-url", args.openai_url), ("--openai-model", args.openai_model)):
            if not value:
                raise FailedPrecondition(f"--embedder openai needs {flag}", reason="EMBEDDER_FLAG_MISSING")
    embedder = EmbedderConfig(
        kind=args.embedder,
        openai_url=args.openai_url,
        openai_model=args.openai_model,
        query_batch_max=args.query_embed_batch,
        query_cache_size=args.query_embed_cache,
        threads=args.embed_threads,
    )
    limits = Limits(
        max_content_bytes=args.max_content_bytes,
        max_batch_items=args.max_batch_items,
        max_future_skew_s=args.max_future_skew_s,
        max_memories=args.max_memories,
        max_fresh_tail=args.max_fresh_tail,
    )
    return SidecarConfig(
        data_dir=args.data,
        listen=tuple(_checked_listen(args.listen or [default_listen()])),
        embedder=embedder,
        judge=args.judge,
        rerank=args.rerank,
        dimension=args.dimension,
        limits=limits,
        index=IndexConfig(
            save_interval_s=args.index_save_interval_s,
            build_rate_per_s=args.index_build_rate,
            bulk_threads=args.index_bulk_threads,
            bulk_call_s=args.index_bulk_call_s,
            expansion_search=args.index_expansion_search,
            entity_vectors_mib=args.entity_vectors_mib,
        ),
        workers=args.workers,
        max_streams=args.max_streams,
        max_streams_per_caller=args.max_streams_per_caller,
        max_unauthenticated_streams=args.max_unauthenticated_streams,
        max_unauthenticated_streams_per_peer=args.max_unauthenticated_streams_per_peer,
        llm=LlmConfig(
            url=args.llm_url,
            model=args.llm_model,
            timeout_s=args.llm_timeout_s,
            judgements_per_write=args.llm_judgements_per_write,
        ),
        governance=GovernanceConfig(
            sweep_interval_s=args.sweep_interval_s,
            checkpoint_interval_s=args.checkpoint_interval_s,
            near_interval_s=args.near_interval_s,
            full_interval_s=args.full_sweep_interval_s,
            sweep_every_writes=args.sweep_every_writes,
            sample_above_count=args.sample_above,
        ),
        snapshot=SnapshotConfig(every_changes=args.snapshot_every_changes, max_age_s=args.snapshot_max_age_s),
        grace_s=args.grace_s,
        ready_file=args.ready_file,
        tls=_tls(args),
        allow_remote=args.allow_remote,
        metrics_listen=args.metrics_listen,
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is less than 1; pass 1 or more")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0.0:  # also NaN
        raise argparse.ArgumentTypeError(f"{text!r} is negative; pass 0 or more")
    return value


def _checked_listen(addresses: list[str]) -> list[str]:
    """The addresses; FailedPrecondition for a unix socket without an absolute path (gRPC needs one)."""
    for address in addresses:
        if address.startswith("unix:") and not address.startswith("unix:///"):
            path = address.removeprefix("unix:").lstrip("/")
            raise FailedPrecondition(
                f"--listen {address}: a unix socket needs an absolute path after unix://, "
                f"e.g. unix://{Path(path).absolute()}",
                reason="BAD_FLAGS",
            )
    return addresses


def _tls(args: argparse.Namespace) -> TlsConfig | None:
    if args.tls_cert is None and args.tls_key is None:
        if args.tls_client_ca is not None:
            raise FailedPrecondition("--tls-client-ca needs --tls-cert and --tls-key", reason="BAD_FLAGS")
        return None
    if args.tls_cert is None or args.tls_key is None:
        raise FailedPrecondition("--tls-cert and --tls-key go together", reason="BAD_FLAGS")
    return TlsConfig(cert_file=args.tls_cert, key_file=args.tls_key, client_ca_file=args.tls_client_ca)


def _token(args: argparse.Namespace) -> str | None:
    """The token of --token-file or $MEMEVO_TOKEN; FailedPrecondition when the file or the variable gives none.

    An empty or unreadable file, or a variable set to nothing, must not mean "no authentication": whoever
    named it meant a token (a deployment's secret that expanded to nothing, say). Unset, it means none.
    """
    path: Path | None = args.token_file
    if path is None:
        value = os.environ.get(TOKEN_ENV)
        if value is None:
            return None
        if not value.strip():
            raise FailedPrecondition(
                f"${TOKEN_ENV} is set but empty; not starting without a token (give it one, or unset it to run "
                "without authentication)",
                reason="BAD_TOKEN",
            )
        return value
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise FailedPrecondition(
            f"--token-file {path}: cannot read it ({reason}); not starting without its token", reason="BAD_TOKEN_FILE"
        ) from exc
    if not token:
        raise FailedPrecondition(
            f"--token-file {path} is empty; not starting without a token (put one in it, or drop the flag "
            "to run without authentication)",
            reason="BAD_TOKEN_FILE",
        )
    if any(c.isspace() for c in token):
        raise FailedPrecondition(
            f"--token-file {path} must hold one token without whitespace (for several, use --tokens-file)",
            reason="BAD_TOKEN_FILE",
        )
    return token


def _kernels_need_compiling() -> bool:
    """Whether a numeric kernel has no compiled copy in Numba's cache, found without importing the kernels.

    Importing them compiles them (their signatures are declared), so the question must be answered first.
    Best effort: where Numba's cache layout cannot be read, the answer is False.
    """
    try:
        from numba.core.caching import CacheImpl

        # Numba's own order of cache places; the first that applies is where it looks.
        locator_classes: list[Any] = list(getattr(CacheImpl, "_locator_classes", []))
        spec = importlib.util.find_spec("memevo.kernels")
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        for source in sorted(Path(folders[0]).glob("*.py")) if folders else []:
            if "cache=True" not in source.read_text():
                continue
            for locator_class in locator_classes:
                locator = locator_class.from_function(_kernels_need_compiling, str(source))
                if locator is not None:
                    if not any(Path(locator.get_cache_path()).glob(f"{source.stem}.*.nbi")):
                        return True
                    break
    except Exception:  # an unknown Numba version: say nothing rather than fail the start
        return False
    return False


def _say_if_kernels_compile() -> None:
    if _kernels_need_compiling():
        print(
            "memevo: compiling the numeric kernels (once after an install, about a minute; cached afterwards)",
            file=sys.stderr,
            flush=True,
        )


def serve(args: argparse.Namespace) -> int:
    """Run a sidecar until SIGTERM or SIGINT."""
    # Flags first: a mistake is reported before a first run's kernel compilation, not after it.
    config, token = config_from_args(args), _token(args)
    if config.embedder.kind == "none":
        from .store.rocks import require_dimension

        require_dimension(config.data_dir, config.dimension)
    _say_if_kernels_compile()
    from .service.auth import TokenTable
    from .service.metrics import configure_logging
    from .service.server import Sidecar

    configure_logging(json_format=args.log_format == "json", level=logging.getLogger().level)
    tokens = TokenTable.from_file(args.tokens_file) if args.tokens_file is not None else None
    sidecar = Sidecar(config, token=token, tokens=tokens, console_listen=args.console_listen)
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
    # Everything durable is written and closed. The interpreter's own teardown would free a large store's
    # structures one object at a time (0.7-1.9 s after the stop at 1M memories), past a supervisor's stop timeout.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def inspect(args: argparse.Namespace) -> int:
    """Print counts by state and kind, schema version, embedder and index status of a data directory."""
    from memevo.v1 import memory_pb2

    from .store.rocks import CF_MEMORIES, META_EMBEDDER, META_SCHEMA, RocksStore
    from .store.vector_index import INDEX_FILE, INDEX_META_FILE

    data: Path = args.data_dir
    if not (data / "rocksdb").is_dir():
        print(f"{data} is not a memevo data directory (no rocksdb/ inside)", file=sys.stderr)
        return 2
    store = RocksStore(data, dimension=0, embedder_identity="none", create=False)
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
        live = sum(n for (state, _), n in counts.items() if state != "MEMORY_STATE_EVICTED")
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
                # An empty graph is not saved: there is nothing to rebuild either.
                else ("empty: no memories to index" if live == 0 else "missing: rebuilt from RocksDB at the next start")
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
    _say_if_kernels_compile()
    return int(run_demo(embedder=args.embedder, judge=args.judge))


def export(args: argparse.Namespace) -> int:
    """Write a data directory's change log, retrievals and outcomes as a replay log (JSON lines)."""
    _say_if_kernels_compile()
    from .replay.export import export_log

    summary = export_log(args.data, args.out)
    print(
        f"wrote {summary.path}: {summary.memories} memories, {summary.events} events, "
        f"{summary.retrievals} retrievals, {summary.outcomes} outcomes"
    )
    return 0


def _read_policy(path: Path) -> policy_pb2.Policy:
    from google.protobuf import json_format

    from .errors import InvalidArgument
    from .replay.export import policy_from_json

    try:
        return policy_from_json(json.loads(path.read_text()))
    except (OSError, ValueError, json_format.ParseError) as exc:
        raise InvalidArgument.field("policy", f"{path} is not a memevo.v1.Policy JSON file: {exc}") from exc


def _replay_options(args: argparse.Namespace) -> ReplayOptions:
    from .replay.replay import ReplayOptions

    return ReplayOptions(
        sweep_interval_s=args.sweep_interval_s,
        sweep_interval_turns=args.sweep_interval_turns,
        stale_penalty=args.stale_penalty,
    )


def _add_replay_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sweep-interval-s",
        type=float,
        default=GovernanceConfig().sweep_interval_s,
        help="log seconds between replayed lifecycle sweeps; 0 = before every retrieval (default: %(default)s)",
    )
    parser.add_argument(
        "--sweep-interval-turns",
        type=float,
        default=1.0,
        help="the same in turns, for agent-turn policies (default: %(default)s)",
    )
    parser.add_argument(
        "--stale-penalty", type=float, default=0.5, help="objective's weight of stale_share (default: %(default)s)"
    )


def replay_command(args: argparse.Namespace) -> int:
    """Replay a log under a policy and print what it would have done."""
    _say_if_kernels_compile()
    from .replay.replay import load_log, replay

    log = load_log(args.log)
    policy = _read_policy(args.policy) if args.policy else log.policy
    report = replay(log, policy, _replay_options(args))
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return 0
    for name, value in report.as_dict().items():
        if name != "store_series":
            print(f"{name}: {round(value, 4) if isinstance(value, float) else value}")
    return 0


def tune_command(args: argparse.Namespace) -> int:
    """Search policies over replays of a log; print and write the best one."""
    _say_if_kernels_compile()
    from .replay.export import policy_to_json
    from .replay.tune import describe, tune

    result = tune(
        args.log,
        baseline=_read_policy(args.policy) if args.policy else None,
        candidates=[_read_policy(path) for path in args.candidate],
        trials=args.trials,
        seed=args.seed,
        workers=args.workers,
        ray_address=args.ray_address,
        options=_replay_options(args),
        progress=not args.no_progress,
    )
    args.out.write_text(json.dumps(policy_to_json(result.best_policy), indent=2) + "\n")
    summary = {
        "best": describe(result.best),
        "baseline": describe(result.baseline),
        "gain": round(result.gain, 4),
        "evaluated": len(result.reports),
        "written_to": str(args.out),
    }
    print(json.dumps(summary, indent=2))
    return 0


def _add_replay_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export_parser = commands.add_parser(
        "export", help="write a data directory's log, retrievals and outcomes as a replay log (JSON lines)"
    )
    export_parser.add_argument(
        "--data", type=Path, default=default_data_dir(), help="data directory, read only (default: %(default)s)"
    )
    export_parser.add_argument("--out", type=Path, required=True, help="replay log to write")
    export_parser.set_defaults(run=export)
    replay_parser = commands.add_parser("replay", help="replay a log under a policy and report what it would do")
    replay_parser.add_argument("--log", type=Path, required=True, help="a replay log from memevo export")
    replay_parser.add_argument(
        "--policy", type=Path, default=None, help="policy JSON (memevo.v1.Policy); default: the log's own"
    )
    _add_replay_options(replay_parser)
    replay_parser.add_argument("--json", action="store_true", help="print JSON")
    replay_parser.set_defaults(run=replay_command)
    tune_parser = commands.add_parser("tune", help="search policies by replaying a log; write the best one")
    tune_parser.add_argument("--log", type=Path, required=True, help="a replay log from memevo export")
    tune_parser.add_argument("--policy", type=Path, default=None, help="baseline policy JSON; default: the log's")
    tune_parser.add_argument(
        "--candidate", type=Path, action="append", default=[], help="also evaluate this policy JSON (repeatable)"
    )
    tune_parser.add_argument("--trials", type=int, default=64, help="random policies to try (default: %(default)s)")
    tune_parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    tune_parser.add_argument("--workers", type=int, default=0, help="local processes; 0 = every core (default)")
    tune_parser.add_argument(
        "--ray-address",
        default=None,
        help="run the replays on this Ray cluster, e.g. 'auto' or host:port (default: local processes)",
    )
    _add_replay_options(tune_parser)
    tune_parser.add_argument(
        "--out",
        type=Path,
        default=Path("best-policy.json"),
        help="where to write the best policy (default: %(default)s)",
    )
    tune_parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    tune_parser.set_defaults(run=tune_command)


def mcp_command(args: argparse.Namespace) -> int:
    """``memevo mcp``: serve the Model Context Protocol over a running sidecar (the ``mcp`` extra)."""
    try:
        from memevo.integrations.mcp_server import McpConfig, run
    except ModuleNotFoundError as exc:
        raise FailedPrecondition(
            f"memevo mcp needs the mcp extra ({exc.name} is not installed): pip install 'memevo[mcp]'",
            reason="MISSING_EXTRA",
        ) from exc
    config = McpConfig(
        target=args.sidecar,
        namespace=args.namespace,
        token=_token(args),
        timeout_s=args.timeout_s,
        transport=args.transport,
        http_host=args.http_host,
        http_port=args.http_port,
        http_path=args.http_path,
    )
    try:
        run(config)
    except ValueError as exc:
        raise FailedPrecondition(str(exc), reason="BAD_FLAGS") from exc
    return 0


def _add_mcp_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "mcp", help="serve MCP tools (remember, recall, ...) over a running sidecar; stdio by default"
    )
    parser.add_argument(
        "--sidecar",
        default=os.environ.get("MEMEVO_ADDRESS") or default_listen(),
        help="the sidecar's address, unix:///abs/path.sock or host:port (default: $MEMEVO_ADDRESS, else "
        f"{default_listen()})",
    )
    parser.add_argument(
        "--namespace",
        default=os.environ.get("MEMEVO_NAMESPACE") or "default",
        help="the one namespace the tools read and write (default: $MEMEVO_NAMESPACE, else default)",
    )
    parser.add_argument(
        "--token-file", type=Path, default=None, help=f"file holding the sidecar's bearer token (default: ${TOKEN_ENV})"
    )
    parser.add_argument(
        "--timeout-s", type=float, default=10.0, help="deadline of each sidecar call, seconds (default: %(default)s)"
    )
    parser.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio: MCP over stdin/stdout; http: streamable HTTP on loopback (default: %(default)s)",
    )
    parser.add_argument("--http-host", default="127.0.0.1", help="loopback address for http (default: %(default)s)")
    parser.add_argument("--http-port", type=int, default=8765, help="TCP port for http (default: %(default)s)")
    parser.add_argument("--http-path", default="/mcp", help="URL path for http (default: %(default)s)")
    parser.set_defaults(run=mcp_command)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``memevo`` command."""
    parser = argparse.ArgumentParser(prog="memevo", description="A gRPC sidecar that governs LLM-agent memory.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="serve a data directory over gRPC")
    _add_serve_arguments(serve_parser)
    serve_parser.set_defaults(run=serve)
    demo_parser = commands.add_parser("demo", help="run a scripted agent session against a temporary sidecar")
    demo_parser.add_argument(
        "--embedder",
        choices=("local", "none"),
        default="local",
        help="local: the bundled offline text embedder; none: the demo sends its own vectors, as an agent "
        "with its own embeddings does (default: %(default)s)",
    )
    demo_parser.add_argument(
        "--judge",
        choices=("local", "none"),
        default="local",
        help="local: the bundled pair model reads the demo's change said in prose, as `memevo serve --judge local` "
        "does; none: as `memevo serve` does by default (default: %(default)s)",
    )
    demo_parser.set_defaults(run=demo)
    inspect_parser = commands.add_parser("inspect", help="print what a data directory holds (sidecar stopped)")
    inspect_parser.add_argument("data_dir", type=Path, help="the data directory (--data of memevo serve)")
    inspect_parser.add_argument("--json", action="store_true", help="print JSON")
    inspect_parser.set_defaults(run=inspect)
    _add_replay_commands(commands)
    _add_mcp_command(commands)
    add_console_command(commands, default_target=default_listen(), token_env=TOKEN_ENV)
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
