package dev.memevo.client;

import com.google.protobuf.ByteString;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/** Vectors as they travel: packed little-endian float32 {@code bytes}. */
public final class Vectors {
  private Vectors() {}

  /**
   * Packs float32 values for {@code MemoryInput.vector} or {@code RecallRequest.query_vector}.
   *
   * @throws IllegalArgumentException for a NaN or infinite value, which the sidecar would refuse
   */
  public static ByteString encode(float... values) {
    ByteBuffer buffer = ByteBuffer.allocate(Float.BYTES * values.length).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < values.length; i++) {
      if (!Float.isFinite(values[i])) {
        throw new IllegalArgumentException("vector[" + i + "] is " + values[i] + "; every value must be finite");
      }
      buffer.putFloat(values[i]);
    }
    return ByteString.copyFrom(buffer.array());
  }

  /**
   * Unpacks a vector the sidecar returned ({@code Memory.vector}, with {@code include_vectors}).
   *
   * @throws IllegalArgumentException when the length is not a multiple of 4 bytes
   */
  public static float[] decode(ByteString bytes) {
    if (bytes.size() % Float.BYTES != 0) {
      throw new IllegalArgumentException(bytes.size() + " bytes is not a whole number of float32 values");
    }
    ByteBuffer buffer = bytes.asReadOnlyByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
    float[] values = new float[bytes.size() / Float.BYTES];
    for (int i = 0; i < values.length; i++) {
      values[i] = buffer.getFloat();
    }
    return values;
  }
}
