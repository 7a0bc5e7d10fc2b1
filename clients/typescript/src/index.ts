/**
 * The memevo client for Node: {@link MemoryClient} plus the generated memevo.v1 messages and enums.
 *
 * ```ts
 * import { MemoryClient, MemoryKind } from "@memevo/client";
 * const memory = new MemoryClient("unix:///run/user/1000/memevo.sock");
 * await memory.remember({ content: "Alice prefers tea", kind: MemoryKind.PREFERENCE, entity: "user:alice" });
 * const { memories } = await memory.recall("what does Alice drink?", { k: 5 });
 * ```
 */

export * from "./client.js";
export * from "./errors.js";
export * from "./vectors.js";
export * from "./sidecar.js";
export * from "./gen/memevo/v1/events_pb.js";
export * from "./gen/memevo/v1/memory_pb.js";
export * from "./gen/memevo/v1/memory_service_pb.js";
export * from "./gen/memevo/v1/policy_pb.js";
export * from "./gen/memevo/v1/review_pb.js";
export { create, toBinary, fromBinary } from "@bufbuild/protobuf";
export { timestampDate, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
