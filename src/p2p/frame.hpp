// The records p2p ranks exchange over the node-local channel (ipc/channel.hpp).
//
//   eager       Eager{tag, comm, bytes, payload}            small messages, data inline
//   rendezvous  Rts{tag, comm, bytes} -> Cts{grant} -> ...   large messages:
//                 Cts mapped: the receiver exported its buffer; the sender maps it,
//                   copies into it (multi-path) and sends Fin.
//                 Cts stream: the receive buffer cannot be exported (plain host
//                   memory); the sender sends Data fragments through the ring.
//   Ssend       Eager with kSync: the receiver answers SyncAck once it matched.
#pragma once
#include <cstdint>

#include "backend/backend.hpp"

namespace gpustripe::p2p {

enum class FrameKind : uint32_t { Eager = 1, Rts = 2, Cts = 3, Data = 4, Fin = 5, SyncAck = 6 };

enum FrameFlags : uint32_t {
  kSync = 1u,        // Eager: the sender waits for SyncAck (synchronous send)
  kCtsMapped = 2u,   // Cts: payload is a CtsMapped
  kCtsStream = 4u,   // Cts: send Data fragments
};

struct Frame {
  FrameKind kind;
  int32_t tag;
  uint64_t comm;
  uint64_t bytes;    // Eager/Rts: message size; Cts: bytes granted (min of size and capacity); Data: fragment
  uint64_t send_id;  // the sender's request
  uint64_t recv_id;  // the receiver's request (Cts, Data, Fin)
  uint64_t offset;   // Data: position in the message
  uint32_t flags;
  uint32_t reserved;
};

struct CtsMapped {
  Backend::IpcMemHandle handle;
  uint64_t exporter_base;  // the allocation's base in the receiver: the mapping cache key
  uint64_t offset;         // receive buffer - base
};

}  // namespace gpustripe::p2p
