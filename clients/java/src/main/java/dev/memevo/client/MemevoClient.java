package dev.memevo.client;

import com.sun.security.auth.module.UnixSystem;
import dev.memevo.v1.BeliefsRequest;
import dev.memevo.v1.BeliefsResponse;
import dev.memevo.v1.BuildContextRequest;
import dev.memevo.v1.BuildContextResponse;
import dev.memevo.v1.DeclareFrameworkRequest;
import dev.memevo.v1.DeclareFrameworkResponse;
import dev.memevo.v1.Experiment;
import dev.memevo.v1.FactKey;
import dev.memevo.v1.ForgetRequest;
import dev.memevo.v1.ForgetResponse;
import dev.memevo.v1.GetPolicyRequest;
import dev.memevo.v1.GetRequest;
import dev.memevo.v1.GetResponse;
import dev.memevo.v1.GetStatsRequest;
import dev.memevo.v1.GetStatsResponse;
import dev.memevo.v1.GovernRequest;
import dev.memevo.v1.GovernResponse;
import dev.memevo.v1.HistoryRequest;
import dev.memevo.v1.HistoryResponse;
import dev.memevo.v1.ListEntitiesRequest;
import dev.memevo.v1.ListEntitiesResponse;
import dev.memevo.v1.Memory;
import dev.memevo.v1.MemoryInput;
import dev.memevo.v1.MemoryServiceGrpc;
import dev.memevo.v1.Policy;
import dev.memevo.v1.PromoteArmRequest;
import dev.memevo.v1.PromoteArmResponse;
import dev.memevo.v1.RecallRequest;
import dev.memevo.v1.RecallResponse;
import dev.memevo.v1.RememberBatchRequest;
import dev.memevo.v1.RememberBatchResponse;
import dev.memevo.v1.RememberRequest;
import dev.memevo.v1.RememberResponse;
import dev.memevo.v1.RememberStreamItem;
import dev.memevo.v1.RememberStreamRequest;
import dev.memevo.v1.RememberStreamResponse;
import dev.memevo.v1.ReportOutcomeRequest;
import dev.memevo.v1.ReportOutcomeResponse;
import dev.memevo.v1.RestoreRequest;
import dev.memevo.v1.ReviewRequest;
import dev.memevo.v1.ReviewResponse;
import dev.memevo.v1.SetExperimentRequest;
import dev.memevo.v1.SupersedeRequest;
import dev.memevo.v1.SupersedeResponse;
import dev.memevo.v1.UnconsolidateRequest;
import dev.memevo.v1.UnconsolidateResponse;
import dev.memevo.v1.UpdatePolicyRequest;
import dev.memevo.v1.WatchRequest;
import com.google.protobuf.Timestamp;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ConnectivityState;
import io.grpc.Context;
import io.grpc.ForwardingClientCall;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.netty.shaded.io.netty.channel.ChannelOption;
import io.grpc.stub.AbstractStub;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Function;

/**
 * A client of one memevo sidecar over one channel; share one per process (it is thread-safe).
 *
 * <p>Every RPC of {@code memevo.v1.MemoryService} has a method of the same name taking its request
 * message (plus shortcuts for the common cases). Unary and client-streaming calls get the client's
 * timeout (default {@link #DEFAULT_TIMEOUT}) unless the current gRPC {@link Context} has a deadline;
 * {@link #watch} and {@link #review} live until closed. A failed call throws a {@link
 * MemevoException} subclass carrying the code and the sidecar's {@code google.rpc} details. Vectors
 * travel as packed little-endian float32 ({@link Vectors}).
 *
 * <pre>{@code
 * try (MemevoClient memory = MemevoClient.connect("unix:///run/user/1000/memevo.sock")) {
 *   memory.remember(MemoryInput.newBuilder().setContent("Alice prefers tea").setVector(Vectors.encode(v)).build());
 *   RecallResponse found = memory.recall(v, 5);
 * }
 * }</pre>
 */
public final class MemevoClient implements AutoCloseable {
  /** The deadline of unary and client-streaming calls when neither the client nor the context sets one. */
  public static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(10);
  /** The largest message the client accepts: 64 MiB, the sidecar's limit. */
  public static final int MAX_MESSAGE_BYTES = 64 << 20;
  /** How many items {@link #rememberStream} puts in one message at most. */
  public static final int STREAM_GROUP_ITEMS = 64;
  /** The first delay before a resuming watch reconnects; it doubles up to {@link #WATCH_BACKOFF_MAX}. */
  public static final Duration WATCH_BACKOFF_INITIAL = Duration.ofMillis(100);
  /** The longest delay between watch reconnect attempts. */
  public static final Duration WATCH_BACKOFF_MAX = Duration.ofSeconds(5);
  /** Consecutive failed reconnects after which a resuming watch gives up. */
  public static final int WATCH_MAX_ATTEMPTS = 10;
  /** The first delay before the channel reconnects to a sidecar it lost; it doubles up to {@link #RECONNECT_BACKOFF_MAX}. */
  public static final Duration RECONNECT_BACKOFF_INITIAL = Duration.ofMillis(100);
  /** The longest delay between reconnect attempts: a restarted sidecar is answered at most this long after it serves again. */
  public static final Duration RECONNECT_BACKOFF_MAX = Duration.ofSeconds(1);

  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final ManagedChannel channel;
  private final boolean ownsChannel;
  private final MemoryServiceGrpc.MemoryServiceBlockingStub blocking;
  private final MemoryServiceGrpc.MemoryServiceStub async;
  private final Duration timeout;

  private MemevoClient(ManagedChannel channel, boolean ownsChannel, MemoryServiceGrpc.MemoryServiceBlockingStub blocking,
      MemoryServiceGrpc.MemoryServiceStub async, Duration timeout) {
    this.channel = channel;
    this.ownsChannel = ownsChannel;
    this.blocking = blocking;
    this.async = async;
    this.timeout = timeout;
  }

  /** A client of the sidecar at {@code target} with the defaults; see {@link #builder}. */
  public static MemevoClient connect(String target) {
    return builder(target).build();
  }

  /** A client of the sidecar at {@link #defaultTarget()} with the defaults. */
  public static MemevoClient connect() {
    return builder().build();
  }

  /**
   * Configures a client of the sidecar at {@code target}: {@code unix:///absolute/path.sock} or
   * {@code host:port}. The channel connects on the first call.
   */
  public static Builder builder(String target) {
    return new Builder(target);
  }

  /** Configures a client of the sidecar at {@link #defaultTarget()}. */
  public static Builder builder() {
    return new Builder(defaultTarget());
  }

  /**
   * The address a client without one talks to: {@code $MEMEVO_ADDRESS} when set, else the socket
   * {@code memevo serve} listens on by default ({@code unix://$XDG_RUNTIME_DIR/memevo-UID.sock},
   * {@code /tmp} without {@code $XDG_RUNTIME_DIR}).
   */
  public static String defaultTarget() {
    return defaultTarget(System.getenv("MEMEVO_ADDRESS"), System.getenv("XDG_RUNTIME_DIR"));
  }

  static String defaultTarget(String address, String runtimeDir) {
    if (address != null && !address.isEmpty()) {
      return address;
    }
    String base = runtimeDir == null || runtimeDir.isEmpty() ? "/tmp" : runtimeDir;
    return "unix://" + base + "/memevo-" + new UnixSystem().getUid() + ".sock";
  }

  /** Options of a {@link MemevoClient}. */
  public static final class Builder {
    private final String target;
    private String token;
    private Duration timeout = DEFAULT_TIMEOUT;
    private boolean waitForReady;
    private final List<ClientInterceptor> interceptors = new ArrayList<>();

    private Builder(String target) {
      this.target = target;
    }

    /** Sends {@code authorization: Bearer <token>} on every call (the sidecar's {@code --token-file}). */
    public Builder token(String token) {
      this.token = token;
      return this;
    }

    /** The deadline of unary and client-streaming calls whose context has none. Default {@link #DEFAULT_TIMEOUT}. */
    public Builder timeout(Duration timeout) {
      this.timeout = timeout;
      return this;
    }

    /** Makes calls wait (up to their deadline) for an unreachable sidecar instead of failing at once with UNAVAILABLE. */
    public Builder waitForReady(boolean waitForReady) {
      this.waitForReady = waitForReady;
      return this;
    }

    /** Adds interceptors (tracing, metrics), run after the client's own. */
    public Builder intercept(ClientInterceptor... more) {
      interceptors.addAll(Arrays.asList(more));
      return this;
    }

    /**
     * Creates the client.
     *
     * @throws IllegalArgumentException for a malformed target, a timeout that is not positive, or a
     *     token that is empty or holds a line break
     */
    public MemevoClient build() {
      if (target == null || target.isBlank()) {
        throw new IllegalArgumentException("target must be 'unix:///absolute/path.sock' or 'host:port'");
      }
      if (target.startsWith("unix://") && !target.startsWith("unix:///")) {
        throw new IllegalArgumentException(
            target + ": a unix socket target needs an absolute path, e.g. unix:///run/memevo.sock");
      }
      if (timeout == null || timeout.isNegative() || timeout.isZero()) {
        throw new IllegalArgumentException("timeout must be positive, got " + timeout);
      }
      List<ClientInterceptor> all = new ArrayList<>();
      if (token != null) {
        if (token.isEmpty() || token.contains("\r") || token.contains("\n")) {
          throw new IllegalArgumentException("token must be non-empty and hold no line break");
        }
        all.add(bearer(token));
      }
      all.addAll(interceptors);
      var builder = Grpc.newChannelBuilder(target, InsecureChannelCredentials.create())
          .maxInboundMessageSize(MAX_MESSAGE_BYTES)
          .userAgent("memevo-java");
      // Pings find a peer that vanished without closing the socket, which would otherwise leave a
      // watch hanging forever; 6 minutes stays above the 5-minute minimum a default server enforces.
      builder.keepAliveTime(6, TimeUnit.MINUTES).keepAliveTimeout(20, TimeUnit.SECONDS);
      if (builder instanceof NettyChannelBuilder netty && target.startsWith("unix:")) {
        // grpc-netty asks every socket for TCP keepalive, which a unix socket lacks: netty would log
        // a warning on each connection. Removing the option is what netty takes as "not set".
        netty.withOption(ChannelOption.SO_KEEPALIVE, null);
      }
      ManagedChannel channel = builder.build();
      new ReconnectPacer(channel).watch();
      // withInterceptors runs the last one first: reversed, the token goes first as documented.
      ClientInterceptor[] ordered = all.toArray(new ClientInterceptor[0]);
      java.util.Collections.reverse(Arrays.asList(ordered));
      var blocking = MemoryServiceGrpc.newBlockingStub(channel).withInterceptors(ordered);
      var async = MemoryServiceGrpc.newStub(channel).withInterceptors(ordered);
      if (waitForReady) {
        blocking = blocking.withWaitForReady();
        async = async.withWaitForReady();
      }
      return new MemevoClient(channel, true, blocking, async, timeout);
    }
  }

  /**
   * Keeps a failing channel's reconnect attempts at most {@link #RECONNECT_BACKOFF_MAX} apart.
   *
   * <p>grpc-java's own backoff starts at 1 s and grows x1.6 per failed attempt up to 2 minutes, so a
   * client that kept calling through a sidecar restart failed on for seconds after the sidecar was
   * back, and the channel builder has no setting for it. While the channel is in TRANSIENT_FAILURE
   * this cuts the backoff short after 0.1 s, then after doubling delays up to 1 s: an attempt at a
   * local sidecar costs one refused connect.
   */
  private static final class ReconnectPacer {
    private static final ScheduledExecutorService TIMER = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread thread = new Thread(r, "memevo-reconnect");
      thread.setDaemon(true); // never keeps a finished program alive
      return thread;
    });

    private final ManagedChannel channel;
    private final AtomicBoolean pacing = new AtomicBoolean();

    ReconnectPacer(ManagedChannel channel) {
      this.channel = channel;
    }

    void watch() {
      ConnectivityState state = channel.getState(false);
      if (state == ConnectivityState.SHUTDOWN) {
        return;
      }
      if (state == ConnectivityState.TRANSIENT_FAILURE && pacing.compareAndSet(false, true)) {
        schedule(RECONNECT_BACKOFF_INITIAL.toMillis());
      }
      channel.notifyWhenStateChanged(state, this::watch);
    }

    private void schedule(long delayMs) {
      TIMER.schedule(() -> {
        if (channel.getState(false) != ConnectivityState.TRANSIENT_FAILURE) {
          pacing.set(false);
          return;
        }
        channel.resetConnectBackoff();
        schedule(Math.min(2 * delayMs, RECONNECT_BACKOFF_MAX.toMillis()));
      }, delayMs, TimeUnit.MILLISECONDS);
    }
  }

  private static ClientInterceptor bearer(String token) {
    String value = "Bearer " + token;
    return new ClientInterceptor() {
      @Override
      public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
          @Override
          public void start(Listener<R> listener, Metadata headers) {
            headers.put(AUTHORIZATION, value);
            super.start(listener, headers);
          }
        };
      }
    };
  }

  /**
   * The same client with another default timeout, sharing this one's channel: closing it does
   * nothing, closing this one ends both.
   */
  public MemevoClient withTimeout(Duration timeout) {
    if (timeout == null || timeout.isNegative() || timeout.isZero()) {
      throw new IllegalArgumentException("timeout must be positive, got " + timeout);
    }
    return new MemevoClient(channel, false, blocking, async, timeout);
  }

  /** Closes the channel (unless this is a {@link #withTimeout} view); calls in flight are cancelled. */
  @Override
  public void close() {
    if (ownsChannel) {
      channel.shutdownNow();
    }
  }

  /** The channel, e.g. for the {@code grpc.health.v1} or reflection stubs. */
  public ManagedChannel channel() {
    return channel;
  }

  /** The generated blocking stub (with the token, no default deadline), for what the wrapper does not cover. */
  public MemoryServiceGrpc.MemoryServiceBlockingStub raw() {
    return blocking;
  }

  private <S extends AbstractStub<S>> S deadlined(S stub) {
    return Context.current().getDeadline() == null ? stub.withDeadlineAfter(timeout.toNanos(), TimeUnit.NANOSECONDS) : stub;
  }

  private <T> T unary(Function<MemoryServiceGrpc.MemoryServiceBlockingStub, T> rpc) {
    try {
      return rpc.apply(deadlined(blocking));
    } catch (StatusRuntimeException e) {
      throw MemevoException.from(e);
    }
  }

  // --- writes ------------------------------------------------------------------------------------

  /** Stores one memory; returns once it is durable. */
  public RememberResponse remember(RememberRequest request) {
    return unary(s -> s.remember(request));
  }

  /** Stores one memory without a request id. */
  public RememberResponse remember(MemoryInput memory) {
    return remember(RememberRequest.newBuilder().setMemory(memory).build());
  }

  /** Stores several memories, all or nothing: one bad item rejects the batch (INVALID_ARGUMENT naming it). */
  public RememberBatchResponse rememberBatch(RememberBatchRequest request) {
    return unary(s -> s.rememberBatch(request));
  }

  /**
   * Streams memories to the sidecar, {@link #STREAM_GROUP_ITEMS} to a message, sending as fast as
   * the sidecar takes them. A bad item ends the stream with {@link MemevoException.InvalidArgument}
   * whose {@code metadata().get("committed_count")} says how many items before it were stored; give
   * every item a request id and the whole stream can be resent.
   */
  public RememberStreamResponse rememberStream(Iterable<RememberStreamItem> items) {
    return rememberStream(items, null);
  }

  /** {@link #rememberStream(Iterable)} with the agent's turn counter on every message. */
  public RememberStreamResponse rememberStream(Iterable<RememberStreamItem> items, long turn) {
    return rememberStream(items, Long.valueOf(turn));
  }

  private RememberStreamResponse rememberStream(Iterable<RememberStreamItem> items, Long turn) {
    Object ready = new Object();
    CompletableFuture<RememberStreamResponse> done = new CompletableFuture<>();
    ClientResponseObserver<RememberStreamRequest, RememberStreamResponse> responses =
        new ClientResponseObserver<>() {
          private RememberStreamResponse response;

          @Override
          public void beforeStart(ClientCallStreamObserver<RememberStreamRequest> requests) {
            requests.setOnReadyHandler(() -> wake(ready));
          }

          @Override
          public void onNext(RememberStreamResponse value) {
            response = value;
          }

          @Override
          public void onError(Throwable error) {
            done.completeExceptionally(MemevoException.from(error));
            wake(ready);
          }

          @Override
          public void onCompleted() {
            done.complete(response);
            wake(ready);
          }
        };
    var requests = (ClientCallStreamObserver<RememberStreamRequest>) deadlined(async).rememberStream(responses);
    try {
      RememberStreamRequest.Builder group = RememberStreamRequest.newBuilder();
      if (turn != null) {
        group.setTurn(turn);
      }
      for (RememberStreamItem item : items) {
        group.addItems(item);
        if (group.getItemsCount() >= STREAM_GROUP_ITEMS) {
          send(requests, group.build(), ready, done);
          group.clearItems();
        }
        if (done.isDone()) {
          break; // the sidecar ended the stream: get() says why
        }
      }
      if (!done.isDone()) {
        if (group.getItemsCount() > 0) {
          send(requests, group.build(), ready, done);
        }
        requests.onCompleted();
      }
      return done.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      requests.cancel("interrupted", e);
      throw MemevoException.from(io.grpc.Status.CANCELLED.withDescription("interrupted").asRuntimeException());
    } catch (ExecutionException e) {
      throw MemevoException.from(e.getCause());
    } catch (RuntimeException e) {
      requests.cancel("the items failed", e); // an exception of the caller's iterable
      throw e;
    }
  }

  private static void wake(Object ready) {
    synchronized (ready) {
      ready.notifyAll();
    }
  }

  private static void send(ClientCallStreamObserver<RememberStreamRequest> requests, RememberStreamRequest message,
      Object ready, CompletableFuture<?> done) throws InterruptedException {
    synchronized (ready) {
      while (!requests.isReady() && !done.isDone()) {
        ready.wait();
      }
    }
    if (!done.isDone()) {
      requests.onNext(message);
    }
  }

  /** Deletes memories (or, with keep_history, marks them OBSOLETE); unknown ids come back in missing_ids. */
  public ForgetResponse forget(ForgetRequest request) {
    return unary(s -> s.forget(request));
  }

  /** Declares that a memory replaces another (an existing one, or a new one to store). */
  public SupersedeResponse supersede(SupersedeRequest request) {
    return unary(s -> s.supersede(request));
  }

  /** Declares that the existing memory {@code newId} replaces {@code oldId}. */
  public SupersedeResponse supersede(long oldId, long newId) {
    return supersede(SupersedeRequest.newBuilder().setOldId(oldId).setNewId(newId).build());
  }

  /**
   * Undoes a supersession (the memory is ACTIVE again with no successor) or a doubt ({@code
   * possibly_outdated_by} cleared) and returns the memory. {@link MemevoException.FailedPrecondition}
   * with reason NOT_RETIRED when there is nothing to undo, KEY_HELD when its fact key has another
   * current value (supersede that one instead).
   */
  public Memory restore(RestoreRequest request) {
    return unary(s -> s.restore(request)).getMemory();
  }

  /** {@link #restore(RestoreRequest)} of one memory, without reason or request id. */
  public Memory restore(long memoryId) {
    return restore(RestoreRequest.newBuilder().setMemoryId(memoryId).build());
  }

  /** Tells the sidecar whether the memories of a retrieval (a Recall's or BuildContext's retrieval_id) helped. */
  public ReportOutcomeResponse reportOutcome(ReportOutcomeRequest request) {
    return unary(s -> s.reportOutcome(request));
  }

  /** Undoes a consolidation: the members become ACTIVE again, the abstraction OBSOLETE. */
  public UnconsolidateResponse unconsolidate(UnconsolidateRequest request) {
    return unary(s -> s.unconsolidate(request));
  }

  /** Declares a new cognitive-framework version; older memories are flagged for re-interpretation. */
  public DeclareFrameworkResponse declareFramework(DeclareFrameworkRequest request) {
    return unary(s -> s.declareFramework(request));
  }

  /** Replaces the governance policy; returns the policy now in force. */
  public Policy updatePolicy(UpdatePolicyRequest request) {
    return unary(s -> s.updatePolicy(request)).getPolicy();
  }

  /** Runs a governance sweep now: the sweep's statistics and (unless a dry run) the consolidation pass's. */
  public GovernResponse govern(GovernRequest request) {
    return unary(s -> s.govern(request));
  }

  /**
   * Starts (or replaces) an online experiment, 2 to 16 policies ranking retrievals side by side; one
   * with no arms ends it. Returns the experiment now running. {@code Experiment.adaptive} asks for
   * outcome-driven traffic and automatic promotion with rollback; the decisions are in the stats'
   * experiment and the change log.
   */
  public Experiment setExperiment(SetExperimentRequest request) {
    return unary(s -> s.setExperiment(request)).getExperiment();
  }

  /** Makes one arm's policy the policy and ends the experiment (NOT_FOUND, reason UNKNOWN_ARM, for no such arm). */
  public PromoteArmResponse promoteArm(PromoteArmRequest request) {
    return unary(s -> s.promoteArm(request));
  }

  // --- reads -------------------------------------------------------------------------------------

  /** Finds the memories that answer a query, best first. */
  public RecallResponse recall(RecallRequest request) {
    return unary(s -> s.recall(request));
  }

  /** The {@code k} current memories nearest a query vector. */
  public RecallResponse recall(float[] queryVector, int k) {
    return recall(RecallRequest.newBuilder().setQueryVector(Vectors.encode(queryVector)).setK(k).build());
  }

  /** Builds an annotated context block for a prompt within a token budget. */
  public BuildContextResponse buildContext(BuildContextRequest request) {
    return unary(s -> s.buildContext(request));
  }

  /** Reads memories by id, in any state but EVICTED; unknown ids come back in missing_ids. */
  public GetResponse get(GetRequest request) {
    return unary(s -> s.get(request));
  }

  /** Reads memories by id, without vectors. */
  public GetResponse get(long... ids) {
    GetRequest.Builder request = GetRequest.newBuilder();
    for (long id : ids) {
      request.addIds(id);
    }
    return get(request.build());
  }

  /** Reads one memory; {@link MemevoException.NotFound} when it does not exist or was evicted. */
  public Memory getOne(long id) {
    GetResponse response = get(id);
    if (response.getMemoriesCount() == 0) {
      throw MemevoException.from(
          io.grpc.Status.NOT_FOUND.withDescription("memory " + id + " does not exist or was evicted").asRuntimeException());
    }
    return response.getMemories(0);
  }

  /** The versions of a fact key or the lineage of a memory, oldest first, with their change-log events. */
  public HistoryResponse history(HistoryRequest request) {
    return unary(s -> s.history(request));
  }

  /** Every version of a fact key, oldest first. */
  public HistoryResponse history(FactKey key) {
    return history(HistoryRequest.newBuilder().setFactKey(key).build());
  }

  /** The lineage of a memory: what it replaced and what replaced it. */
  public HistoryResponse history(long memoryId) {
    return history(HistoryRequest.newBuilder().setMemoryId(memoryId).build());
  }

  /**
   * What the agent believes about an entity now: one belief per attribute with a current value, keyed or read
   * from prose ({@code getReadFromText()}), each with the memory holding it (valid from, source, confidence),
   * open doubts, other current values and the fact key to pass to {@link #history(FactKey)}. An unknown entity
   * has no beliefs (not an error).
   */
  public BeliefsResponse beliefs(BeliefsRequest request) {
    return unary(s -> s.beliefs(request));
  }

  /** The beliefs about {@code entity} in {@code namespace} (empty: "default"). */
  public BeliefsResponse beliefs(String namespace, String entity) {
    return beliefs(BeliefsRequest.newBuilder().setNamespace(namespace).setEntity(entity).build());
  }

  /**
   * The beliefs about {@code entity} in {@code namespace} (empty: "default") held at {@code asOf} (world time):
   * a version superseded since counts, one that became true later does not. The response's {@code getAsOf()}
   * says which instant it answers for.
   */
  public BeliefsResponse beliefs(String namespace, String entity, Instant asOf) {
    Timestamp at = Timestamp.newBuilder().setSeconds(asOf.getEpochSecond()).setNanos(asOf.getNano()).build();
    return beliefs(BeliefsRequest.newBuilder().setNamespace(namespace).setEntity(entity).setAsOf(at).build());
  }

  /**
   * The entities of a namespace, most recently changed first, with their counts and last change; the request's
   * query keeps the ids that contain it (any case), and {@code getTotalCount()} says how many matched.
   */
  public ListEntitiesResponse listEntities(ListEntitiesRequest request) {
    return unary(s -> s.listEntities(request));
  }

  /** Counts, index status, the last change-log sequence, the last sweeps and the running experiment. */
  public GetStatsResponse getStats() {
    return unary(s -> s.getStats(GetStatsRequest.getDefaultInstance()));
  }

  /** The governance policy in force. */
  public Policy getPolicy() {
    return unary(s -> s.getPolicy(GetPolicyRequest.getDefaultInstance())).getPolicy();
  }

  // --- streams -----------------------------------------------------------------------------------

  /**
   * Streams change-log events after {@code request.after_sequence} (0 replays the whole log; unset:
   * only events after the call, which starts at the first {@code hasNext()}), then live ones, until
   * closed. With {@code resume}, a stream cut with
   * UNAVAILABLE or ended by a sidecar shutting down reconnects from the last delivered sequence
   * (backoff {@link #WATCH_BACKOFF_INITIAL} doubling to {@link #WATCH_BACKOFF_MAX}, {@link
   * #WATCH_MAX_ATTEMPTS} attempts), so no event is lost or repeated.
   */
  public WatchStream watch(WatchRequest request, boolean resume) {
    return new WatchStream(this, blocking, request, resume, WATCH_MAX_ATTEMPTS);
  }

  /** {@link #watch(WatchRequest, boolean)} without resuming. */
  public WatchStream watch(WatchRequest request) {
    return watch(request, false);
  }

  /**
   * Opens the Review conversation (no deadline): send a hello first, then one decision per proposal
   * received on {@code responses}. Errors reach {@code responses.onError} as {@link MemevoException}s.
   */
  public StreamObserver<ReviewRequest> review(StreamObserver<ReviewResponse> responses) {
    return async.review(new StreamObserver<>() {
      @Override
      public void onNext(ReviewResponse value) {
        responses.onNext(value);
      }

      @Override
      public void onError(Throwable error) {
        responses.onError(MemevoException.from(error));
      }

      @Override
      public void onCompleted() {
        responses.onCompleted();
      }
    });
  }
}
