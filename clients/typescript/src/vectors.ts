/**
 * Vectors travel as packed little-endian float32 `bytes` (DESIGN §6); the client speaks Float32Array.
 */

/** What the client accepts wherever a vector goes: float32 values, or numbers converted to float32. */
export type VectorLike = Float32Array | readonly number[];

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Pack a vector as little-endian float32 bytes. Throws `TypeError` for a non-finite value. */
export function encodeVector(vector: VectorLike): Uint8Array {
  const values = vector instanceof Float32Array ? vector : Float32Array.from(vector);
  const out = new Uint8Array(values.length * 4);
  const view = new DataView(out.buffer);
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!;
    if (!Number.isFinite(v)) {
      throw new TypeError(`vector[${i}] is ${v}; vectors must hold finite numbers`);
    }
    view.setFloat32(i * 4, v, true);
  }
  return out;
}

/**
 * Unpack little-endian float32 bytes (e.g. `Memory.vector`) into a new Float32Array.
 * An empty input (the vector was not asked for) gives an empty array. Throws `RangeError`
 * when the length is not a multiple of 4.
 */
export function decodeVector(bytes: Uint8Array): Float32Array {
  if (bytes.length % 4 !== 0) {
    throw new RangeError(`${bytes.length} bytes is not a whole number of float32 values`);
  }
  const count = bytes.length / 4;
  if (LITTLE_ENDIAN && bytes.byteOffset % 4 === 0) {
    // Copy so the result does not alias a protobuf buffer that may be reused.
    return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
  }
  const out = new Float32Array(count);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  for (let i = 0; i < count; i++) out[i] = view.getFloat32(i * 4, true);
  return out;
}
