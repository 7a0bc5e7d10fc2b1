package dev.memevo.v1;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import io.grpc.MethodDescriptor;
import io.grpc.ServiceDescriptor;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.HashSet;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** Smoke tests of the generated stubs: they compile, round-trip through bytes, and match the contract. */
class StubsTest {

  /** Packs float32 values little-endian, the wire form of every memevo vector. */
  static ByteString vector(float... values) {
    ByteBuffer buffer = ByteBuffer.allocate(4 * values.length).order(ByteOrder.LITTLE_ENDIAN);
    for (float v : values) {
      buffer.putFloat(v);
    }
    return ByteString.copyFrom(buffer.array());
  }

  @Test
  void rememberRequestRoundTripsThroughBytes() throws Exception {
    RememberRequest request =
        RememberRequest.newBuilder()
            .setMemory(
                MemoryInput.newBuilder()
                    .setContent("Alice prefers green tea")
                    .setVector(vector(1.5f, -2f, 0.25f))
                    .setKind(MemoryKind.MEMORY_KIND_PREFERENCE)
                    .setEntity("user:alice")
                    .setFact(Fact.newBuilder().setAttribute("drink").setValue("green tea"))
                    .addTags("drinks")
                    .putMetadata("origin", "java-test"))
            .setRequestId("java-1")
            .setTurn(3)
            .build();

    RememberRequest parsed = RememberRequest.parseFrom(request.toByteArray());

    assertEquals(request, parsed);
    assertTrue(parsed.hasTurn());
    assertEquals(3, parsed.getTurn());
    assertArrayEquals(
        new byte[] {0x00, 0x00, (byte) 0xc0, 0x3f}, parsed.getMemory().getVector().substring(0, 4).toByteArray());
  }

  @Test
  void serviceStubDescribesEveryRpcOfTheContract() {
    ServiceDescriptor service = MemoryServiceGrpc.getServiceDescriptor();
    assertEquals("memevo.v1.MemoryService", service.getName());
    Set<String> stubMethods = new HashSet<>();
    for (MethodDescriptor<?, ?> method : service.getMethods()) {
      stubMethods.add(method.getBareMethodName());
    }
    Set<String> contractMethods = new HashSet<>();
    MemoryServiceOuterClass.getDescriptor()
        .findServiceByName("MemoryService")
        .getMethods()
        .forEach(m -> contractMethods.add(m.getName()));
    assertEquals(contractMethods, stubMethods);
    assertEquals(
        MethodDescriptor.MethodType.SERVER_STREAMING, MemoryServiceGrpc.getWatchMethod().getType());
    assertEquals(MethodDescriptor.MethodType.BIDI_STREAMING, MemoryServiceGrpc.getReviewMethod().getType());
    assertEquals(
        MethodDescriptor.MethodType.CLIENT_STREAMING, MemoryServiceGrpc.getRememberStreamMethod().getType());
  }
}
