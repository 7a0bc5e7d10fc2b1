package dev.memevo.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.memevo.v1.MemoryInput;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

/**
 * A long-lived client, and a new one, answer within a second or two of their sidecar coming back after
 * a SIGKILL, however long it was down: grpc-java's own reconnect backoff (1 s, x1.6 per failed attempt)
 * would put the next attempt seconds after the sidecar serves again.
 */
class ReconnectTest {
  /**
   * The sidecar stays dead this long while the old client keeps calling: with gRPC's own backoff the
   * attempts are then about 26 and 43 s after the crash, so a sidecar ready after 30–36 s waits 5 s or more.
   */
  private static final long DOWN_MS = 30_000;
  /** Ready to first answer, at most: the backoff cap is 1 s, the rest is slack for a loaded machine. */
  private static final long ANSWER_WITHIN_MS = 3_000;

  private static final float[] VECTOR = {1, 1, 1, 1, 1, 1, 1, 1};

  /** Milliseconds until {@code client} answers a recall, calling every 50 ms. */
  private static long msToFirstAnswer(MemevoClient client) {
    long start = System.nanoTime();
    while (true) {
      try {
        client.recall(VECTOR, 1);
        return (System.nanoTime() - start) / 1_000_000;
      } catch (MemevoException.Unavailable e) {
        if (System.nanoTime() - start > 30_000_000_000L) {
          throw e;
        }
        sleep(50);
      }
    }
  }

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  @Test
  void clientsAnswerSoonAfterTheSidecarRestarts() throws Exception {
    Path runDir = Files.createTempDirectory("memevo-java-reconnect-");
    Sidecar sidecar = Sidecar.startIn(runDir);
    try (MemevoClient old = MemevoClient.connect(sidecar.unix)) {
      old.remember(MemoryInput.newBuilder().setContent("before the crash").setVector(Vectors.encode(VECTOR)).build());
      sidecar.kill();
      for (long end = System.currentTimeMillis() + DOWN_MS; System.currentTimeMillis() < end; sleep(50)) {
        // The call in flight when the connection drops may fail as UNKNOWN "channel closed".
        assertThrows(MemevoException.class, () -> old.recall(VECTOR, 1));
      }
      sidecar = Sidecar.startIn(runDir);
      try (MemevoClient fresh = MemevoClient.connect(sidecar.unix)) {
        var oldMs = CompletableFuture.supplyAsync(() -> msToFirstAnswer(old));
        var freshMs = CompletableFuture.supplyAsync(() -> msToFirstAnswer(fresh));
        System.out.println("first answer after the restart: long-lived client " + oldMs.get() + " ms, new client "
            + freshMs.get() + " ms");
        assertTrue(oldMs.get() <= ANSWER_WITHIN_MS, "the long-lived client first answered " + oldMs.get() + " ms after the restart");
        assertTrue(freshMs.get() <= ANSWER_WITHIN_MS, "a new client first answered " + freshMs.get() + " ms after the restart");
      }
      assertEquals("before the crash", old.recall(VECTOR, 1).getMemories(0).getMemory().getContent());
    } finally {
      sidecar.close();
      Sidecar.delete(runDir);
    }
  }

  @Test
  void withoutAnAddressAClientTalksToMemevoAddressElseServesDefaultSocket() {
    assertEquals("127.0.0.1:7070", MemevoClient.defaultTarget("127.0.0.1:7070", "/run/user/1234"));
    String uid = String.valueOf(new com.sun.security.auth.module.UnixSystem().getUid());
    assertEquals("unix:///run/user/1234/memevo-" + uid + ".sock", MemevoClient.defaultTarget("", "/run/user/1234"));
    assertEquals("unix:///tmp/memevo-" + uid + ".sock", MemevoClient.defaultTarget(null, null));
  }
}
