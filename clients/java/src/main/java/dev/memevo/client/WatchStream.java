package dev.memevo.client;

import dev.memevo.v1.ChangeEvent;
import dev.memevo.v1.MemoryServiceGrpc;
import dev.memevo.v1.WatchRequest;
import dev.memevo.v1.WatchResponse;
import io.grpc.Context;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.concurrent.ThreadLocalRandom;

/**
 * A change-log stream from {@link MemevoClient#watch}: iterate it ({@code hasNext} blocks for the
 * next event) and close it to end the call; {@code close()} may come from another thread, and the
 * iteration then ends. A failure that ends the stream is thrown by {@code hasNext} as a {@link
 * MemevoException}.
 */
public final class WatchStream implements Iterator<ChangeEvent>, AutoCloseable {
  private final MemevoClient client;
  private final MemoryServiceGrpc.MemoryServiceBlockingStub stub;
  private final WatchRequest request;
  private final boolean resume;
  private final int maxAttempts;

  private volatile Long after;
  private volatile Context.CancellableContext call;
  private Iterator<WatchResponse> responses;
  private ChangeEvent next;
  private int failures;
  private volatile boolean closed;

  WatchStream(MemevoClient client, MemoryServiceGrpc.MemoryServiceBlockingStub stub, WatchRequest request, boolean resume,
      int maxAttempts) {
    this.client = client;
    this.stub = stub;
    this.request = request;
    this.resume = resume;
    this.maxAttempts = maxAttempts;
    this.after = request.hasAfterSequence() ? request.getAfterSequence() : null;
  }

  /** The sequence of the last event delivered (or the request's after_sequence); null when neither. */
  public Long lastSequence() {
    return after;
  }

  @Override
  public synchronized boolean hasNext() {
    if (next != null) {
      return true;
    }
    while (!closed) {
      MemevoException error = null;
      try {
        if (responses == null) {
          open();
        }
        while (responses.hasNext()) {
          WatchResponse response = responses.next();
          if (response.hasEvent()) {
            next = response.getEvent();
            after = next.getSequence();
            failures = 0;
            return true;
          }
        }
      } catch (StatusRuntimeException | MemevoException e) {
        if (closed) {
          return false; // close() cancelled the call
        }
        error = MemevoException.from(e);
      }
      // The stream ended: cleanly (a sidecar shutting down) when error is null.
      endCall();
      boolean reconnect = resume && failures < maxAttempts
          && (error == null || error.code() == Status.Code.UNAVAILABLE);
      if (!reconnect) {
        closed = true;
        if (error != null) {
          throw error;
        }
        return false;
      }
      failures++;
      try {
        Thread.sleep(backoffMillis(failures));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        close();
        throw MemevoException.from(Status.CANCELLED.withDescription("interrupted").asRuntimeException());
      }
    }
    return false;
  }

  @Override
  public synchronized ChangeEvent next() {
    if (!hasNext()) {
      throw new NoSuchElementException("the watch stream is over");
    }
    ChangeEvent event = next;
    next = null;
    return event;
  }

  /** Ends the stream and its call; safe to call twice and from another thread. */
  @Override
  public void close() {
    closed = true;
    Context.CancellableContext current = call;
    if (current != null) {
      current.cancel(null);
    }
  }

  private void open() {
    if (resume && after == null) {
      after = client.getStats().getLastSequence(); // a reconnect needs a place to resume from: the log's end now
    }
    WatchRequest.Builder builder = request.toBuilder();
    if (after != null) {
      builder.setAfterSequence(after);
    }
    call = Context.current().withCancellation();
    Context previous = call.attach();
    try {
      responses = stub.watch(builder.build());
    } finally {
      call.detach(previous);
    }
    if (closed) {
      call.cancel(null);
    }
  }

  private void endCall() {
    responses = null;
    if (call != null) {
      call.cancel(null);
    }
  }

  private static long backoffMillis(int attempt) {
    long base = Math.min(MemevoClient.WATCH_BACKOFF_MAX.toMillis(),
        MemevoClient.WATCH_BACKOFF_INITIAL.toMillis() << Math.min(attempt - 1, 20));
    return (long) (base * (0.5 + ThreadLocalRandom.current().nextDouble() / 2)); // jitter against reconnect stampedes
  }
}
