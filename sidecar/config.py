"""Configuration of a sidecar: frozen dataclasses, units in the field names."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .embedding import EmbedderConfig

MIB = 1024 * 1024


def default_data_dir() -> Path:
    """The per-user data directory: ``$XDG_DATA_HOME/memevo`` or ``~/.local/share/memevo``."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "memevo"


def default_listen() -> str:
    """A unix socket under ``$XDG_RUNTIME_DIR`` (or the temp dir), private to the user."""
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    return f"unix://{base}/memevo-{os.getuid()}.sock"


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Hard limits on requests; past them a call gets INVALID_ARGUMENT or RESOURCE_EXHAUSTED."""

    max_content_bytes: int = 64 * 1024
    """UTF-8 bytes of one memory's content or one query."""
    max_batch_items: int = 10_000
    """Memories in one RememberBatch."""
    max_k: int = 1_000
    """Memories one Recall may return, and ids one Get or Forget may name."""
    max_message_bytes: int = 64 * MIB
    """gRPC message size, both directions."""
    max_future_skew_s: float = 86_400.0
    """How far in the future a memory's world time (valid_from) may lie."""
    max_fresh_tail: int = 200_000
    """Acknowledged vectors waiting for the ANN graph; past it writes get RESOURCE_EXHAUSTED."""
    max_memories: int = 0
    """Memories (not evicted) one data directory may hold; 0 = no limit. Past it writes get
    RESOURCE_EXHAUSTED and nothing of the call is written (a batch is all or nothing)."""


@dataclass(frozen=True, kw_only=True)
class IndexConfig:
    """The usearch HNSW graph and its background builder."""

    connectivity: int = 16
    """Graph degree M."""
    expansion_add: int = 128
    """Candidate list size while inserting (efConstruction)."""
    expansion_search: int = 384
    """Candidate list size while searching (ef), and the fewest neighbours recall asks the graph for, so the floor
    of every search's beam whatever its k (usearch's beam is the larger of the two). Set for a memory's own vector
    to find it: on 100k unit Gaussian 384-d memories (no structure for the graph to follow, the hardest case) 64
    missed 9.3 % of them at any k, 256 0.20 %, 384 0.02 %, at ~5x the search time of 64 (benchmarks/own_vector.py;
    issue 41). The misses grow with the graph (1M: 17 % at 384). Since then a memory stored with exactly the query's
    vector is found whatever the beam (store/vector_digests.py): the beam now decides how many of the true nearest
    neighbours of other queries are found (recall@10 against exact search, 100k clustered with noise 2.5: 0.47 at
    64, 0.70 at 384). Build settings unchanged: the builder's insert rate bounds ingest."""
    dtype: str = "f16"
    """Scalar type of the graph's vectors. Half precision halves the graph's memory and, at 384-d on the
    2-core benchmark machine, built and searched 1.5x faster than f32 with the same recall@10 against exact
    search (0.999, 30k clustered vectors; benchmarks/index_dtype.py); cosines from the graph are good to ~1e-3.
    int8 was faster still but lost recall (0.84)."""
    build_batch: int = 4096
    """Vectors the builder moves from the fresh tail into the graph per step (at most 512: vector_index.BUILD_STEP),
    and the most missing vectors start-up puts in the tail instead of building them into the graph before serving."""
    build_threads: int = 1
    """Threads usearch inserts a short builder step with (fewer than ``bulk_min_vectors``). Keep 1: usearch 2.26
    multi-threaded add() can leave nodes unreachable (upstream issue 735; seen here as memories their own vector
    never finds)."""
    insert_chunk: int = 8
    """Vectors per usearch add() call and thread for a short step (a few writes): a concurrent search waits for one
    call (~15 ms at 8 on 1 thread), and usearch answers no search while an add() runs."""
    bulk_threads: int = 1
    """Threads the builder may insert a step of at least ``bulk_min_vectors`` with (a backlog: a bulk load, a
    rebuild); 0 = one per core; 1 = one, as before. With more than one it measures both on the steps themselves and
    uses the faster per vector, trying the slower again every 16 steps. Off by default: usearch's add() on both
    cores of the 2-core benchmark machine inserted 2.2x as fast as on one when the machine was idle (1,737 against
    794/s), but not while a model training shared the machine: end to end it then acknowledged 9 % fewer writes per
    second than with one thread, and in process (benchmarks/bulk_load.py, issue 41 item 7) usearch's own two threads
    were no faster than one, the builder inserted as fast on one thread as on two, and a search beside it waited
    3-4x longer at p99 (40-60 ms against 13-17 ms) with two. Against upstream issue 735, every vector such an add()
    inserted is looked up by its own vector before it leaves the fresh tail and inserted again on one thread when
    the graph does not find it; calls are sized by ``bulk_call_s``."""
    bulk_call_s: float = 0.02
    """Seconds one multi-threaded add() call of a backlog step is sized to take, from the measured seconds per
    vector (the first step of a thread count takes ``insert_chunk`` per thread). usearch answers no search while an
    add() runs, so this is about the longest a recall waits for the graph during a bulk load (at 0.05, in one
    round, searches beside a bulk load waited 31 ms at p50 against ~4 ms at 16 vectors a call;
    benchmarks/bulk_load.py); longer calls lose less at each call's end, where the threads wait for each other and
    for usearch's thread 0, which takes the interpreter lock back after every vector. 0 = ``insert_chunk`` per
    thread, as before issue 41 item 7. One thread's calls take ``insert_chunk`` whatever this is."""
    bulk_min_vectors: int = 256
    """Live vectors a builder step must move to be inserted on ``bulk_threads``; a step is at most 512
    (vector_index.BUILD_STEP), so a tail of 256+ vectors is a backlog, a few writes are not."""
    builder_nice: int = 10
    """Nice increment of the builder thread alone (Linux; 0 = none). Each write hands the builder ~1.5-2 ms of
    HNSW insert CPU, more than the write itself costs: at a lower priority it takes the cores the writers and
    readers leave idle instead of delaying them, and still drains the tail whenever they pause."""
    backlog_vectors: int = 100_000
    """Fresh-tail size past which the index is behind and the builder runs at normal priority (where the
    system lets a thread raise its priority back), back to ``builder_nice`` below half of it. Far above a
    burst (which the write path should absorb at full speed), well below ``Limits.max_fresh_tail`` (where
    writes wait for the builder, so it should run first)."""
    save_interval_s: float = 300.0
    """Seconds between index saves while there are changes; also saved at shutdown (see ``close_save_budget_s``)."""
    rebuild_save_interval_s: float = 60.0
    """Seconds between index saves while a rebuild after start-up is under way, so that a kill during it loses at
    most this much work. usearch holds the GIL while it writes; a save lets other threads run between pieces of
    the graph's links, so requests wait for the copy of its vectors only (0.08-0.13 s for 200k 384-d vectors on the
    2-core benchmark machine, 0.2-0.26 s before; ``benchmarks/save_stall.py``)."""
    close_save_budget_s: float = 2.0
    """Longest graph save a clean stop waits for, less what the stop spends on the start-up snapshot (waiting for a
    background one, or this process's last write when it writes one itself). Estimated from the graph's size and
    the slowest of this process's last saves; a save that runs past it anyway is abandoned. A graph not saved at
    stop loses nothing: the next start serves at once and inserts what the saved file lacks in the background
    (a supervisor's stop timeout is often 10 s; issue 25 asks 5 s at 1M memories)."""
    build_rate_per_s: float = 0.0
    """Most vectors per second the builder inserts; 0 = no cap. A cap leaves the cores to requests during a
    long rebuild, at the price of a longer exact scan per recall meanwhile."""
    exact_scan_limit: int = 1024
    """Filters matching at most this many memories are answered by an exact scan."""
    entity_scan_limit: int = 8192
    """Entity filters over at most this many memories (the entity's, any state) are answered by an exact scan of
    its vectors held in memory (``entity_vectors_mib``) whatever the filter's other terms; larger entities by an
    over-fetched ANN search, which misses some of an entity's nearest."""
    entity_vectors_mib: int = 256
    """Memory for entities' vectors held as one block each for filtered recall (store/entity_vectors.py), least
    recently used dropped first: 1.5 KB a memory at 384-d, so 256 MiB holds ~170k. 0 = none held: every filtered
    recall reads its vectors from the graph or RocksDB, as before issue 28."""


@dataclass(frozen=True, kw_only=True)
class GovernanceConfig:
    """When the governance daemon works."""

    sweep_interval_s: float = 5.0
    """Seconds between sweeps of the ACTIVE tier (ACTIVE memories and those near a threshold); 0 turns every
    scheduled and event-driven sweep off (Govern still sweeps on demand)."""
    sweep_every_writes: int = 10_000
    """Also sweep the ACTIVE tier after this many written rows; 0 = by time only."""
    near_interval_s: float = 1.0
    """Seconds between sweeps of the memories the last sweep found near a threshold; 0 = with the ACTIVE tier."""
    full_interval_s: float = 300.0
    """Seconds between sweeps of everything, ARCHIVED memories included; 0 = never scheduled."""
    near_margin: float = 0.05
    """Value distance to a threshold (or a running eviction grace) that puts a memory in the near tier."""
    sample_above_count: int = 20_000_000
    """Stores with more slots than this are swept by samples: each scheduled sweep takes a rotating block."""
    sample_count: int = 2_000_000
    """Slots per sampled sweep (a block of consecutive ids; near-tier samples take this many near ids)."""
    sweep_threads: int = 0
    """Threads a scheduled or event-driven sweep uses; 0 = every core but one, so that recalls keep a core
    while a large store is swept (a sweep is bound by memory bandwidth: one thread does most of it)."""
    react_to_events: bool = True
    """Re-evaluate at once the memories a perception event (update, supersession, outcome) names."""
    checkpoint_interval_s: float = 5.0
    """Seconds between checkpoints of access statistics: a crash loses at most this much of them."""
    retrieval_ttl_s: float = 7 * 86_400.0
    """How long a retrieval id accepts ReportOutcome; older retrieval records are deleted."""
    review_nice: int = 10
    """Nice increment of the review worker thread (Linux; 0 = none): its consolidation passes search the ANN
    index for every seed (about a second of CPU at 100k memories), work that can wait for idle cores."""


@dataclass(frozen=True, kw_only=True)
class SnapshotConfig:
    """When the start-up snapshot is written while the sidecar serves (it is also written at a clean stop).

    A start after a crash loads the last snapshot and reads again only the memories changed after it (~80 us
    each), instead of every record (80 s at 1M memories on the 2-core benchmark machine).
    """

    every_changes: int = 10_000
    """Change-log entries since the last snapshot that make the next one due; 0 = only at a clean stop."""
    max_age_s: float = 300.0
    """Seconds after which any change (statistics checkpoints included) makes a snapshot due; 0 = by count only."""
    min_interval_s: float = 10.0
    """Fewest seconds between two snapshots; also at least ``cost_ratio`` times the last one's duration."""
    cost_ratio: float = 10.0
    """Snapshots may take at most 1/this of the time (one of 1M memories with a million distinct words took
    ~1.5 s on the idle benchmark machine, 0.4 s of it holding writes back while the structures were copied;
    1.1-1.3 s held back while serving a rebuild at load 5-12: benchmarks/RESULTS.md)."""
    catch_up_record_s: float = 50e-6
    """Seconds a start spends reading one changed record again after the snapshot (0.5-0.9 s for 8,000-14,500
    at 100k, 0.3-0.5 s per 10,000 at 1M, under load). When the changes since the last snapshot would cost more
    than that snapshot took to write, the next is written without waiting out ``min_interval_s`` and
    ``cost_ratio``: a write burst does not leave the snapshot far behind (see ``engine.behind_burst``)."""


@dataclass(frozen=True, kw_only=True)
class LlmConfig:
    """The OpenAI-compatible chat-completions endpoint of policy mode LLM: it writes abstractions and judges soft
    conflicts (does the newer memory replace the older?) that no reviewer decides."""

    url: str = ""
    """Base URL, e.g. ``http://127.0.0.1:8080/v1`` (we POST ``{url}/chat/completions``); empty = none configured."""
    model: str = ""
    """Model name sent with each request."""
    api_key_env: str = "MEMEVO_LLM_API_KEY"
    """Environment variable holding the API key (sent as ``Authorization: Bearer``); unset sends none."""
    timeout_s: float = 60.0
    """Seconds one request may take before the consolidation or judgement is left for later."""
    max_output_tokens: int = 300
    """Upper bound on the abstraction's length, in the model's tokens."""
    judgements_per_write: float = 1.0
    """Budget of the chat endpoint's supersession judgements: this many per memory written since the start, after
    a first 20; a doubt past it stays a doubt (a ranking signal) until later writes earn the call. Held-out prose
    asked ~0.3 a write (RESULTS.md). 0 = the first 20 only."""


@dataclass(frozen=True, kw_only=True)
class TlsConfig:
    """Server certificate for TCP listen addresses, and optionally a CA whose client certificates are required."""

    cert_file: Path
    """PEM certificate chain of the server."""
    key_file: Path
    """PEM private key of the server."""
    client_ca_file: Path | None = None
    """PEM CA bundle; when set, callers must present a certificate it signed (mutual TLS)."""


@dataclass(frozen=True, kw_only=True)
class SidecarConfig:
    """Everything ``memevo serve`` needs."""

    data_dir: Path = field(default_factory=default_data_dir)
    """The data directory: RocksDB, the saved index, the lock."""
    listen: tuple[str, ...] = ()
    """Addresses: ``unix:///abs/path.sock`` or ``host:port`` (``127.0.0.1:0`` picks a free port)."""
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    """How text becomes vectors; kind "none" means clients send vectors."""
    dimension: int = 0
    """Vector dimension for a new data directory without an embedder; 0 = the embedder's."""
    limits: Limits = field(default_factory=Limits)
    index: IndexConfig = field(default_factory=IndexConfig)
    governance: GovernanceConfig = field(default_factory=GovernanceConfig)
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)
    """When the start-up snapshot is written while serving."""
    llm: LlmConfig = field(default_factory=LlmConfig)
    """Chat-completions endpoint for consolidations and soft conflicts decided by policy mode LLM."""
    commit_group_max: int = 4096
    """Most mutations one synced RocksDB write groups together."""
    grace_s: float = 5.0
    """Seconds in-flight calls get to finish at shutdown."""
    workers: int = 32
    """gRPC worker threads for unary calls and health checks (streams run on threads of their own)."""
    max_streams: int = 512
    """Streams of verified callers (Watch, Review, RememberStream, health Watch) open at once, each on a thread of
    its own; more are refused with RESOURCE_EXHAUSTED."""
    max_streams_per_caller: int = 128
    """Streams one caller (verified bearer token, else client certificate, else connection) may hold open at once."""
    max_unauthenticated_streams: int = 32
    """Health Watch streams without a valid token (on a sidecar with tokens) open at once, on threads of their own;
    they never count against ``max_streams``."""
    max_unauthenticated_streams_per_peer: int = 4
    """Health Watch streams without a valid token one peer host (every connection from it) may hold open at once."""
    ready_file: Path | None = None
    """Written (JSON: pid, listen addresses) once the server is serving."""
    tls: TlsConfig | None = None
    """TLS for every TCP listen address (unix sockets stay plain); None = plaintext."""
    allow_remote: bool = False
    """Allow listen addresses beyond loopback (then TLS and caller authentication are required too)."""
    metrics_listen: str = ""
    """Loopback ``host:port`` of the Prometheus text endpoint (``/metrics``); empty = off."""
    rerank: str = "none"
    """Who orders the best few candidates of a text Recall by whether they answer the question: "local", the
    bundled reranker (a cross-encoder, a few ms a candidate); "none", the ranking formula alone."""
    judge: str = "none"
    """Who judges whether a prose statement replaces an older one that no key or template settles: "local", the
    bundled pair model (off the write path); "none", vector likeness alone. Off by default while the model retires
    additions and other attributes too often (held-out prose: 64 % of additions touched; RESULTS.md)."""
