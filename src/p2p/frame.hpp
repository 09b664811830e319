// The records p2p ranks exchange over the node-local channel (ipc/channel.hpp).
//
//   eager       Eager{tag, comm, bytes, payload}            small messages, data inline
//   rendezvous  large messages, three ways:
//     pull      Rts{exported send buffer} -> the receiver, once matched, maps the
//               sender's device buffer and copies out of it (multi-path), then sends
//               Done. The sender needs no progress of its own for the data to move, so
//               a sender blocked in some other MPI call cannot stall the receiver.
//     push      Rts -> Cts{exported receive buffer}: the sender's buffer is host memory
//               (not exportable) and the receiver's is device memory; the sender copies
//               into it and sends Fin.
//     stream    Rts -> Cts{stream}: neither end is exportable; Data fragments follow.
//   Ssend       Eager with kSync: the receiver answers SyncAck once it matched.
//   eager slot  Eager with kEagerSlot: a device message's bytes are in the sender's
//               eager slot `offset` (eager_slots.hpp), not in the record; the receiver
//               copies them out and frees the slot.
//   offer       Offer{exported receive buffer, comm, tag, capacity, recv_id, offset = the
//               messages of the sender the receiver had read}: a device receive posted for
//               one source while no other receive could take that source's messages. The
//               sender holds it only if it had sent no more messages than that (none can be
//               on the way to that receive); its next device send that matches it and is
//               within the device eager limit copies straight into the buffer:
//               Pushed{recv_id, tag, bytes} at once (the receive is
//               taken, in order with the sender's later messages), Fin once the copy landed.
//               The announcement's crossing and the receiver's match are off the message's path.
//   withdraw    Withdraw{recv_id}: the receiver cancels a receive it offered. The sender drops
//               that offer if it still holds it and answers WithdrawAck{recv_id}; a message it
//               had already sent into or toward that receive is ahead of the answer in the
//               ring, so the receive is cancelled only if nothing took it before the answer.
#pragma once
#include <cstdint>

#include "backend/backend.hpp"

namespace gpustripe::p2p {

enum class FrameKind : uint32_t {
  Eager = 1, Rts = 2, Cts = 3, Data = 4, Fin = 5, SyncAck = 6, Done = 7, Offer = 8, Pushed = 9, Withdraw = 10,
  WithdrawAck = 11
};

enum FrameFlags : uint32_t {
  kSync = 1u,        // Eager: the sender waits for SyncAck (synchronous send)
  kCtsMapped = 2u,   // Cts: payload is an Exported receive buffer (push)
  kCtsStream = 4u,   // Cts: send Data fragments
  kRtsExported = 8u, // Rts: payload is the Exported send buffer (pull)
  kEagerSlot = 16u,  // Eager: the data is in eager slot `offset` of the sender's area to us
};

struct Frame {
  FrameKind kind;
  int32_t tag;
  uint64_t comm;
  uint64_t bytes;    // Eager/Rts: message size; Cts/Done: bytes granted (min of size and capacity); Data: fragment
  uint64_t send_id;  // the sender's request
  uint64_t recv_id;  // the receiver's request (Cts, Data, Fin)
  uint64_t offset;   // Data: position in the message; Eager with kEagerSlot: the slot; Offer: messages read
  uint32_t flags;
  uint32_t reserved;
};

// A device buffer one side exports for the other to map.
struct Exported {
  Backend::IpcMemHandle handle;
  uint64_t exporter_base;  // the allocation's base in the exporter: the mapping cache key
  uint64_t offset;         // buffer - base
};

}  // namespace gpustripe::p2p
