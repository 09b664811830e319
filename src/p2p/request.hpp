// A nonblocking send or receive of the p2p layer. Created by Endpoint::isend/irecv,
// advanced by the endpoint's progress, complete when done() is true.
#pragma once
#include <gpustripe/status.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "p2p/mover.hpp"

namespace gpustripe::p2p {

struct P2pStatus {
  int source = -1;          // channel rank the message came from (receives)
  int tag = -1;
  uint64_t bytes = 0;       // bytes delivered (receives) or sent
  uint64_t message_bytes = 0;  // bytes the sender sent (> bytes when truncated)
  gpustripe_status_t error = GPUSTRIPE_SUCCESS;  // GPUSTRIPE_ERR_TRUNCATE, ...
  bool cancelled = false;   // a receive cancelled before any message took it (Endpoint::cancel)
  std::string message;      // why, when error != SUCCESS
};

class Request {
 public:
  bool is_send() const { return send_; }
  // Complete: its part is over and every record it posted is in the channel's ring
  // (a record still queued here would need this process's progress to go out).
  bool done() const { return state_ == State::Done && unflushed_ == 0; }
  const P2pStatus& status() const { return status_; }

 private:
  friend class Endpoint;
  enum class State {
    Posted,     // receive: waiting for a matching message; send: Rts sent, waiting for Cts or Done
    SyncWait,   // eager synchronous send: waiting for SyncAck
    Streaming,  // send: Data fragments left to push; receive: fragments arriving
    Copying,    // send (push) / receive (pull): the copy between the buffers is in flight
    WaitFin,    // receive: the sender copies into our buffer
    Done,
  };
  bool send_ = false;
  State state_ = State::Posted;
  uint64_t id_ = 0;
  int peer_ = -1;  // destination, or source (-1: any)
  int tag_ = -1;   // -1: any (receives)
  uint64_t comm_ = 0;
  void* rbuf_ = nullptr;
  const void* sbuf_ = nullptr;
  MemLoc loc_;
  uint64_t bytes_ = 0;     // send size, or receive capacity
  uint64_t granted_ = 0;   // rendezvous: bytes the receiver accepts
  uint64_t progress_ = 0;  // bytes streamed / received so far
  uint64_t peer_id_ = 0;   // the other side's request id
  uint64_t ticket_ = 0;    // Mover ticket while Copying
  int unflushed_ = 0;      // records posted for it still in the endpoint's outgoing queue
  bool traced_ = false;    // its completion is in the phase trace (trace.hpp)
  bool eager_slot_ = false;  // its data went through an eager slot (the trace's eager phases)
  bool pushed_offer_ = false;  // send: copied into a receive its peer offered (ends with Pushed)
  bool offered_ = false;        // receive: offered to its source (frame.hpp, Offer)
  bool withdrawing_ = false;    // receive: cancelled after its offer; waits for WithdrawAck
  // A pool import the copy maps through (HandleCache::leased): returned before the other side
  // hears the copy is done. lease_peer_ < 0: none.
  int lease_peer_ = -1;
  uint64_t lease_base_ = 0;
  uint64_t lease_buffer_ = 0;
  // Receive copying out of an eager slot of rank slot_peer_: freed once the copy completes.
  int slot_ = -1;
  int slot_peer_ = -1;
  P2pStatus status_;
};

using RequestPtr = std::shared_ptr<Request>;

}  // namespace gpustripe::p2p
