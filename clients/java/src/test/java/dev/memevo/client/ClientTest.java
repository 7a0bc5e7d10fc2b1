package dev.memevo.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Timestamp;
import dev.memevo.v1.AdaptiveSettings;
import dev.memevo.v1.AllocationMode;
import dev.memevo.v1.ArmStats;
import dev.memevo.v1.Belief;
import dev.memevo.v1.BeliefsResponse;
import dev.memevo.v1.ChangeEvent;
import dev.memevo.v1.ChangeEventType;
import dev.memevo.v1.EntitySummary;
import dev.memevo.v1.Experiment;
import dev.memevo.v1.ExperimentArm;
import dev.memevo.v1.ExperimentPhase;
import dev.memevo.v1.ExperimentStats;
import dev.memevo.v1.Fact;
import dev.memevo.v1.GetRequest;
import dev.memevo.v1.ListEntitiesRequest;
import dev.memevo.v1.ListEntitiesResponse;
import dev.memevo.v1.Memory;
import dev.memevo.v1.MemoryInput;
import dev.memevo.v1.MemoryKind;
import dev.memevo.v1.MemoryServiceGrpc;
import dev.memevo.v1.MemorySource;
import dev.memevo.v1.MemoryState;
import dev.memevo.v1.Policy;
import dev.memevo.v1.RecallResponse;
import dev.memevo.v1.RecalledMemory;
import dev.memevo.v1.RememberRequest;
import dev.memevo.v1.RememberResponse;
import dev.memevo.v1.RememberStreamItem;
import dev.memevo.v1.RememberStreamResponse;
import dev.memevo.v1.SetExperimentRequest;
import dev.memevo.v1.WatchRequest;
import dev.memevo.v1.WriteOutcome;
import dev.memevo.v1.WriteResult;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.Deadline;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The Java client against a live sidecar (started once here, stopped with SIGTERM at the end). */
class ClientTest {
  private static Sidecar sidecar;
  private static MemevoClient client; // over the unix socket

  @BeforeAll
  static void start() throws Exception {
    sidecar = Sidecar.start();
    client = MemevoClient.connect(sidecar.unix);
  }

  @AfterAll
  static void stop() throws Exception {
    if (client != null) {
      client.close();
    }
    if (sidecar != null) {
      String log = sidecar.log();
      assertEquals(0, sidecar.stop(), () -> "the sidecar stops cleanly on SIGTERM:\n" + log);
      sidecar.close();
    }
  }

  /** A vector pointing mostly along one axis (distinct per axis, never all zeros). */
  static float[] axis(int i, float jitter) {
    float[] v = new float[Sidecar.DIMENSION];
    java.util.Arrays.fill(v, 0.01f);
    v[i % v.length] = 1;
    v[(i + 1) % v.length] = jitter;
    return v;
  }

  static MemoryInput memory(String content, float[] vector) {
    return MemoryInput.newBuilder().setContent(content).setVector(Vectors.encode(vector)).build();
  }

  @Test
  void vectorsPackLittleEndianFloat32() {
    var bytes = Vectors.encode(1.5f, -2f, 0.25f);
    assertArrayEquals(new byte[] {0x00, 0x00, (byte) 0xc0, 0x3f}, bytes.substring(0, 4).toByteArray());
    assertArrayEquals(new float[] {1.5f, -2f, 0.25f}, Vectors.decode(bytes));
    assertThrows(IllegalArgumentException.class, () -> Vectors.decode(bytes.substring(0, 3)));
    assertThrows(IllegalArgumentException.class, () -> Vectors.encode(1f, Float.NaN));
  }

  @Test
  void badTargetsTimeoutsAndTokensAreRefusedBeforeAnyCall() {
    assertThrows(IllegalArgumentException.class, () -> MemevoClient.connect("unix://relative.sock"));
    assertThrows(IllegalArgumentException.class, () -> MemevoClient.connect(" "));
    assertThrows(IllegalArgumentException.class, () -> MemevoClient.builder("127.0.0.1:1").timeout(Duration.ZERO).build());
    assertThrows(IllegalArgumentException.class, () -> MemevoClient.builder("127.0.0.1:1").token("a\nb").build());
  }

  @Test
  void everyRpcHasAMethodOfItsName() {
    List<String> missing = new ArrayList<>();
    for (var method : MemoryServiceGrpc.getServiceDescriptor().getMethods()) {
      String rpc = method.getBareMethodName();
      String name = Character.toLowerCase(rpc.charAt(0)) + rpc.substring(1);
      boolean found = false;
      for (Method m : MemevoClient.class.getMethods()) {
        found |= m.getName().equals(name) && Modifier.isPublic(m.getModifiers());
      }
      if (!found) {
        missing.add(rpc);
      }
    }
    assertEquals(List.of(), missing, "RPCs without a MemevoClient method");
  }

  @Test
  void rememberStoresAMemoryAndARetryReplaysIt() {
    RememberRequest request = RememberRequest.newBuilder()
        .setMemory(memory("Alice prefers green tea", axis(0, 0)).toBuilder().setEntity("user:alice"))
        .setRequestId("java-remember-1")
        .setTurn(3)
        .build();
    RememberResponse first = client.remember(request);
    assertEquals(WriteOutcome.WRITE_OUTCOME_CREATED, first.getResult().getOutcome());
    assertFalse(first.getReplayed());
    Memory stored = first.getResult().getMemory();
    assertTrue(stored.getId() > 0);
    assertEquals(MemoryState.MEMORY_STATE_ACTIVE, stored.getState());
    assertEquals(3, stored.getTurn());

    RememberResponse again = client.remember(request.toBuilder().setTurn(4).build());
    assertTrue(again.getReplayed());
    assertEquals(stored.getId(), again.getResult().getMemory().getId());

    var reused = assertThrows(MemevoException.AlreadyExists.class, () -> client.remember(
        request.toBuilder().setMemory(memory("another memory", axis(0, 0))).build()));
    assertEquals("REQUEST_ID_REUSED", reused.reason());
    assertEquals(List.of("request_id"), reused.fieldViolations().stream().map(MemevoException.FieldViolation::field).toList());
    assertFalse(reused.isRetryable());
  }

  @Test
  void theTcpAddressServesTheSameData() {
    try (MemevoClient tcp = MemevoClient.builder(sidecar.tcp).timeout(Duration.ofSeconds(5)).build()) {
      long id = tcp.remember(memory("over tcp", axis(5, 0))).getResult().getMemory().getId();
      assertEquals("over tcp", client.getOne(id).getContent());
    }
  }

  @Test
  void recallRanksTheNearestFirstAndReturnsVectors() {
    long near = client.remember(memory("recall: nearest", axis(2, 0.1f))).getResult().getMemory().getId();
    client.remember(memory("recall: farther", axis(2, 0.9f)));
    RecallResponse found = client.recall(dev.memevo.v1.RecallRequest.newBuilder()
        .setQueryVector(Vectors.encode(axis(2, 0.1f))).setK(2).setIncludeVectors(true).build());
    RecalledMemory best = found.getMemories(0);
    assertEquals(near, best.getMemory().getId());
    assertArrayEquals(axis(2, 0.1f), Vectors.decode(best.getMemory().getVector()), 1e-6f);
    assertFalse(found.getRetrievalId().isEmpty());
    assertEquals(2, client.recall(axis(2, 0.1f), 2).getMemoriesCount());
  }

  @Test
  void aWrongVectorSizeIsInvalidArgumentWithItsField() {
    var error = assertThrows(MemevoException.InvalidArgument.class,
        () -> client.remember(memory("short", new float[] {1, 2, 3})));
    assertEquals(Status.Code.INVALID_ARGUMENT, error.code());
    assertEquals(1, error.fieldViolations().size());
    assertEquals("memory.vector", error.fieldViolations().get(0).field());
    assertTrue(error.fieldViolations().get(0).description().contains("dimension is 8"), error.getMessage());
    assertEquals("INVALID_ARGUMENT", error.reason());
    assertEquals("memevo.dev", error.domain());
    assertFalse(error.isRetryable());
  }

  @Test
  void getListsMissingIdsAndGetOneOfAnUnknownIdIsNotFound() {
    long id = client.remember(memory("get: present", axis(3, 0.2f))).getResult().getMemory().getId();
    var response = client.get(GetRequest.newBuilder().addIds(id).addIds(1L << 40).build());
    assertEquals(id, response.getMemories(0).getId());
    assertEquals(List.of(1L << 40), response.getMissingIdsList());
    assertThrows(MemevoException.NotFound.class, () -> client.getOne(1L << 40));
  }

  @Test
  void restoreUndoesASupersessionAndRefusesACurrentMemory() {
    long old = client.remember(memory("restore: the first runbook", axis(6, 0.2f))).getResult().getMemory().getId();
    long replacement = client.remember(memory("restore: a dead-letter queue", axis(1, 0.9f))).getResult().getMemory().getId();
    client.supersede(old, replacement);
    assertEquals(MemoryState.MEMORY_STATE_OBSOLETE, client.getOne(old).getState());

    Memory restored = client.restore(old);
    assertEquals(MemoryState.MEMORY_STATE_ACTIVE, restored.getState());
    assertEquals(0, restored.getSupersededBy());
    assertFalse(client.getOne(replacement).getSupersedesList().contains(old));

    var refused = assertThrows(MemevoException.FailedPrecondition.class, () -> client.restore(old));
    assertEquals("NOT_RETIRED", refused.reason());
  }

  @Test
  void rememberStreamSendsManyItemsPerMessageInOrder() {
    int count = MemevoClient.STREAM_GROUP_ITEMS * 2 + 3;
    List<RememberStreamItem> items = IntStream.range(0, count)
        .mapToObj(i -> RememberStreamItem.newBuilder().setMemory(memory("streamed " + i, axis(i, 0.5f)))
            .setRequestId("java-stream-" + i).build())
        .toList();
    RememberStreamResponse response = client.rememberStream(items, 9);
    assertEquals(count, response.getIdsCount());
    assertEquals(count, response.getCreatedCount());
    var stored = client.get(response.getIdsList().stream().mapToLong(Long::longValue).toArray());
    for (int i = 0; i < count; i++) {
      assertEquals("streamed " + i, stored.getMemories(i).getContent());
      assertEquals(9, stored.getMemories(i).getTurn());
    }
    RememberStreamResponse again = client.rememberStream(items, 9);
    assertEquals(count, again.getReplayedCount());
    assertEquals(response.getIdsList(), again.getIdsList());
  }

  @Test
  void aStreamStopsAtABadItemAndSaysHowManyWereCommitted() {
    List<RememberStreamItem> items = List.of(
        RememberStreamItem.newBuilder().setMemory(memory("stream: good", axis(4, 0.3f))).build(),
        RememberStreamItem.newBuilder().setMemory(memory("stream: bad", new float[] {1})).build());
    var error = assertThrows(MemevoException.InvalidArgument.class, () -> client.rememberStream(items));
    assertEquals("[1].memory.vector", error.fieldViolations().get(0).field());
    assertEquals("1", error.metadata().get("failed_index"));
    // Items of one message are validated together, so whether the good one was stored depends on grouping.
    assertTrue(List.of("0", "1").contains(error.metadata().get("committed_count")), error.metadata().toString());

    // A long stream stops pulling items once the sidecar has refused one.
    int[] pulled = {0};
    Iterable<RememberStreamItem> endless = () -> new java.util.Iterator<>() {
      @Override
      public boolean hasNext() {
        return true;
      }

      @Override
      public RememberStreamItem next() {
        int i = pulled[0]++;
        float[] vector = i == 5 ? new float[] {1, 2, 3} : axis(i, 0.1f);
        return RememberStreamItem.newBuilder().setMemory(memory("long " + i, vector)).build();
      }
    };
    assertThrows(MemevoException.InvalidArgument.class, () -> client.rememberStream(endless));
    assertTrue(pulled[0] < 100_000, "pulled " + pulled[0] + " items after the stream failed");
  }

  @Test
  void unaryCallsCarryTheClientTimeoutAsTheirDeadline() {
    List<Deadline> deadlines = new CopyOnWriteArrayList<>();
    ClientInterceptor record = new ClientInterceptor() {
      @Override
      public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        deadlines.add(options.getDeadline());
        return next.newCall(method, options);
      }
    };
    try (MemevoClient timed = MemevoClient.builder(sidecar.unix).timeout(Duration.ofSeconds(7)).intercept(record).build()) {
      timed.getStats();
      timed.withTimeout(Duration.ofSeconds(3)).getPolicy();
    }
    assertEquals(2, deadlines.size());
    assertNotNull(deadlines.get(0));
    long first = deadlines.get(0).timeRemaining(TimeUnit.MILLISECONDS);
    long second = deadlines.get(1).timeRemaining(TimeUnit.MILLISECONDS);
    assertTrue(first > 3_000 && first <= 7_000, "deadline of the 7 s client: " + first + " ms left");
    assertTrue(second <= 3_000, "deadline of the 3 s view: " + second + " ms left");
  }

  @Test
  void anUnreachableSidecarIsUnavailableAndRetryable() {
    try (MemevoClient nowhere = MemevoClient.builder("unix:///nonexistent/memevo.sock").timeout(Duration.ofSeconds(20)).build()) {
      var error = assertThrows(MemevoException.Unavailable.class, nowhere::getStats);
      assertTrue(error.isRetryable());
    }
  }

  @Test
  void watchReplaysTheLogInOrderThenDeliversLiveEvents() throws Exception {
    long last = client.getStats().getLastSequence();
    try (WatchStream stream = client.watch(WatchRequest.newBuilder().setAfterSequence(0).build())) {
      long previous = 0;
      while (previous < last) {
        ChangeEvent event = stream.next();
        assertTrue(event.getSequence() > previous, "sequences increase");
        previous = event.getSequence();
      }
      assertEquals(last, previous, "the replay reaches the log's end exactly");
      long id = client.remember(memory("watch: live", axis(7, 0.7f))).getResult().getMemory().getId();
      ChangeEvent live = stream.next();
      while (live.getMemoryId() != id) { // a background sweep may log something first
        assertTrue(live.getSequence() > previous);
        previous = live.getSequence();
        live = stream.next();
      }
      assertTrue(live.getSequence() > last);
      assertEquals(ChangeEventType.CHANGE_EVENT_TYPE_CREATED, live.getType());
    }
  }

  @Test
  void closeEndsAWatchBlockedInAnotherThread() throws Exception {
    long last = client.getStats().getLastSequence();
    WatchStream stream = client.watch(WatchRequest.newBuilder().setAfterSequence(last)
        .addTypes(ChangeEventType.CHANGE_EVENT_TYPE_CREATED).build());
    long id = client.remember(memory("watch: one live event", axis(3, 0.6f))).getResult().getMemory().getId();
    assertEquals(id, stream.next().getMemoryId()); // the call is open; the next hasNext() blocks
    List<Boolean> result = new CopyOnWriteArrayList<>();
    Thread reader = new Thread(() -> result.add(stream.hasNext()));
    reader.start();
    while (reader.getState() != Thread.State.WAITING && reader.isAlive()) {
      Thread.sleep(10); // until it is parked waiting for an event
    }
    stream.close();
    reader.join(60_000); // a bound against a hang, not a measurement
    assertFalse(reader.isAlive(), "close() did not end the blocked hasNext()");
    assertEquals(List.of(false), result);
  }

  @Test
  void aResumingWatchReconnectsAcrossASidecarRestartWithAToken() throws Exception {
    Path dir = Files.createTempDirectory("memevo-java-resume-");
    Path token = dir.resolve("token");
    Files.writeString(token, "java-secret\n");
    Files.setPosixFilePermissions(token, PosixFilePermissions.fromString("rw-------"));
    Sidecar first = Sidecar.startIn(dir, "--token-file", token.toString());
    Sidecar second = null;
    try (MemevoClient own = MemevoClient.builder(first.unix).token("java-secret").build();
        MemevoClient anonymous = MemevoClient.connect(first.unix)) {
      assertThrows(MemevoException.Unauthenticated.class, anonymous::getStats);
      WatchStream stream = own.watch(WatchRequest.newBuilder().setAfterSequence(0)
          .addTypes(ChangeEventType.CHANGE_EVENT_TYPE_CREATED).build(), true);
      try (stream) {
        own.remember(memory("before the restart", axis(1, 0)));
        ChangeEvent before = stream.next();
        assertEquals(1, before.getSequence());
        assertEquals(0, first.stop(), first::log);
        second = Sidecar.startIn(dir, "--token-file", token.toString()); // same data directory, same socket
        long id = own.remember(memory("after the restart", axis(2, 0))).getResult().getMemory().getId();
        ChangeEvent after = stream.next();
        assertTrue(after.getSequence() > before.getSequence());
        assertEquals(id, after.getMemoryId());
        assertEquals(after.getSequence(), stream.lastSequence());
      }
    } finally {
      first.close();
      if (second != null) {
        second.close();
      }
      Sidecar.delete(dir);
    }
  }

  private static final String BELIEFS_NS = "java-beliefs";

  private static WriteResult rememberAna(String content, float jitter, long validFromS, Fact fact) {
    MemoryInput.Builder item = MemoryInput.newBuilder()
        .setContent(content)
        .setVector(Vectors.encode(axis(3, jitter)))
        .setNamespace(BELIEFS_NS)
        .setKind(MemoryKind.MEMORY_KIND_FACT)
        .setEntity("person:ana")
        .setValidFrom(Timestamp.newBuilder().setSeconds(validFromS));
    if (fact != null) {
      item.setFact(fact);
    }
    return client.remember(RememberRequest.newBuilder().setMemory(item).build()).getResult();
  }

  @Test
  void anEntitysBeliefsIncludeAValueReadFromProse() {
    Memory keyed = rememberAna("Ana works at Shopify.", 0.1f, 1_000,
        Fact.newBuilder().setAttribute("employer").setValue("Shopify").build()).getMemory();
    WriteResult prose = rememberAna("These days Ana works at Canva.", 0.12f, 2_000, null);
    assertEquals(WriteOutcome.WRITE_OUTCOME_SUPERSEDED_PREVIOUS, prose.getOutcome(),
        "perception no longer reads this change: pick a wording it reads");

    BeliefsResponse found = client.beliefs(BELIEFS_NS, "person:ana");
    assertEquals("person:ana", found.getEntity());
    assertEquals(1, found.getBeliefsCount());
    Belief belief = found.getBeliefs(0);
    assertEquals(List.of("employer", "canva"), List.of(belief.getAttribute(), belief.getValue()));
    assertTrue(belief.getReadFromText());
    assertEquals(2, belief.getVersionCount());
    assertEquals(prose.getMemory().getId(), belief.getMemory().getId());
    assertEquals(MemorySource.MEMORY_SOURCE_AGENT_INFERENCE, belief.getMemory().getSource());
    assertEquals(2_000, belief.getMemory().getValidFrom().getSeconds());
    assertEquals(List.of(keyed.getId(), prose.getMemory().getId()),
        client.history(belief.getHistoryKey()).getVersionsList().stream().map(Memory::getId).toList());

    // As of 1 500 s, before the prose statement became true: the keyed value, superseded since.
    BeliefsResponse then = client.beliefs(BELIEFS_NS, "person:ana", Instant.ofEpochSecond(1_500));
    assertEquals(1_500, then.getAsOf().getSeconds());
    assertEquals(1, then.getBeliefsCount());
    Belief held = then.getBeliefs(0);
    assertEquals(List.of("employer", "Shopify", false, keyed.getId(), MemoryState.MEMORY_STATE_OBSOLETE),
        List.of(held.getAttribute(), held.getValue(), held.getReadFromText(), held.getMemory().getId(),
            held.getMemory().getState()));
    assertEquals(0, client.beliefs(BELIEFS_NS, "person:ana", Instant.ofEpochSecond(999)).getBeliefsCount());

    ListEntitiesResponse listed = client.listEntities(
        ListEntitiesRequest.newBuilder().setNamespace(BELIEFS_NS).setQuery("ANA").build());
    assertEquals(1, listed.getTotalCount());
    EntitySummary ana = listed.getEntities(0);
    assertEquals(List.of("person:ana", 2L, 1L, 1L),
        List.of(ana.getEntity(), ana.getMemoryCount(), ana.getCurrentCount(), ana.getBeliefCount()));
    assertTrue(ana.hasLastChangedAt());

    var error = assertThrows(MemevoException.InvalidArgument.class, () -> client.beliefs(BELIEFS_NS, ""));
    assertEquals(List.of("entity"), error.fieldViolations().stream().map(MemevoException.FieldViolation::field).toList());
  }

  /** An experiment of arms java-a and java-b, each {@code policy} renamed, with {@code adaptive} settings. */
  static SetExperimentRequest adaptiveExperiment(String name, Policy policy, AdaptiveSettings.Builder adaptive) {
    var experiment = Experiment.newBuilder().setName(name).setAdaptive(adaptive);
    for (String arm : List.of("java-a", "java-b")) {
      experiment.addArms(ExperimentArm.newBuilder().setName(arm).setPolicy(policy.toBuilder().setName(arm)));
    }
    return SetExperimentRequest.newBuilder().setExperiment(experiment).build();
  }

  @Test
  void setExperimentTakesAdaptiveSettingsAndStatsShowThem() {
    Policy policy = client.getPolicy();
    try {
      Experiment running = client.setExperiment(adaptiveExperiment("java-adaptive", policy,
          AdaptiveSettings.newBuilder()
              .setAllocation(AllocationMode.ALLOCATION_MODE_THOMPSON)
              .setFloorShare(0.1)
              .setSnapshotOutcomes(5)));
      assertEquals(AllocationMode.ALLOCATION_MODE_THOMPSON, running.getAdaptive().getAllocation());
      ExperimentStats stats = client.getStats().getExperiment();
      assertEquals(List.of("java-adaptive", AllocationMode.ALLOCATION_MODE_THOMPSON,
              ExperimentPhase.EXPERIMENT_PHASE_RUNNING, "java-a"),
          List.of(stats.getName(), stats.getAllocation(), stats.getPhase(), stats.getControlArm()));
      assertEquals(2, stats.getArmsCount());
      for (ArmStats a : stats.getArmsList()) {
        assertEquals(List.of(0.5, 0.5), List.of(a.getShare(), a.getProbabilityBest()), a.getName());
      }

      // Automatic promotion without the parameters it may move is refused, naming the field.
      var bad = AdaptiveSettings.newBuilder()
          .setAllocation(AllocationMode.ALLOCATION_MODE_THOMPSON)
          .setPromoteProbability(0.99);
      var error = assertThrows(MemevoException.InvalidArgument.class,
          () -> client.setExperiment(adaptiveExperiment("java-adaptive-bad", policy, bad)));
      assertEquals(List.of("experiment.adaptive.tunable_parameters"),
          error.fieldViolations().stream().map(MemevoException.FieldViolation::field).toList());
    } finally {
      client.setExperiment(SetExperimentRequest.newBuilder().setExperiment(Experiment.getDefaultInstance()).build());
    }
    assertFalse(client.getStats().hasExperiment());
  }
}
