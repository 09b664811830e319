// Eager slots: where small device messages wait between the sender's GPU and the
// receiver's, in host memory both processes map and have registered for their GPUs.
//
// Why: an eager device message used to cross host memory in four steps, two of them
// synchronous copies (device -> the sender's pinned bounce buffer -> the channel's ring,
// then ring -> the receiver's bounce buffer -> device), so a window of small sends
// serialized one blocking copy per message on each side. With a slot, the sender's copy
// writes straight into shared memory and the receiver's copy reads straight out of it
// (as NCCL's shared-memory transport does): one asynchronous copy per side, overlapping
// across a window, and no host memcpy.
//
// One area per ordered pair of ranks (sender -> receiver), a POSIX shared-memory
// segment the sender creates on its first slot to that receiver, named after the
// channel; the receiver maps it when the first record naming a slot arrives and removes
// the name then. A sender may leave before its receiver has read that record, so the
// sender removes the name on leaving only when the receiver is gone already; a receiver
// leaving removes the names of the areas it never mapped (so nothing stays behind a job,
// a killed sender's included). A slot's state word
// has one writer per transition: the sender takes a free slot (0 -> 1), the receiver
// frees it (1 -> 0, release) once its copy out of it is complete, so the sender's next
// copy into it cannot overwrite bytes still being read. The area's header carries its
// geometry, so both ends need not agree on settings.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "ipc/channel.hpp"
#include "ipc/shm_segment.hpp"

namespace gpustripe::p2p {

class EagerSlots {
 public:
  // Slots of `slot_bytes` (> 0), `count` of them per receiver. `backend` null: host memory
  // only (a receiver without GPUs still takes device messages sent to it).
  EagerSlots(ipc::Channel& channel, Backend* backend, uint64_t slot_bytes, int count);
  // Unregisters and unmaps the areas: the caller has completed the copies into and out of them.
  ~EagerSlots();
  EagerSlots(const EagerSlots&) = delete;
  EagerSlots& operator=(const EagerSlots&) = delete;

  uint64_t slot_bytes() const { return slot_bytes_; }
  // Slots per receiver (the areas this rank makes; a peer's area has the count in its header).
  int count() const { return count_; }

  // Sender: a free slot to `dst` (held until the receiver releases it), or -1 when every
  // slot is held or the area cannot be made here (logged once; the caller sends another way).
  int acquire(int dst);
  // Sender: where the slot's bytes go.
  char* outbound(int dst, int slot) const;

  // Receiver: the first `bytes` of slot `slot` from `src`; maps src's area on first use.
  // Throws ERR_INTERNAL when the record names a slot or a length the area does not have.
  const char* inbound(int src, int slot, uint64_t bytes);
  // Receiver: the slot's bytes are consumed; the sender may reuse it.
  void release(int src, int slot);

  // Slots to `dst` held now (the receiver has not released them yet), and slots taken so far
  // to any receiver: what a test sees of the path its messages took.
  int held(int dst) const;
  uint64_t taken() const { return taken_; }

 private:
  struct Area {
    ipc::ShmSegment seg;
    bool registered = false;
    uint32_t count = 0;
    uint64_t slot_bytes = 0;
    uint32_t next = 0;  // sender: where the search for a free slot starts
  };
  std::string name(int src, int dst) const;
  bool create_outbound(int dst);
  void open_inbound(int src);
  void drop(Area& a);

  ipc::Channel& ch_;
  Backend* backend_;
  uint64_t slot_bytes_;
  int count_;
  std::vector<std::unique_ptr<Area>> out_;  // per receiver, made on first use
  std::vector<std::unique_ptr<Area>> in_;   // per sender, mapped on first use
  std::vector<bool> out_failed_;            // the area to this receiver could not be made
  uint64_t taken_ = 0;
};

}  // namespace gpustripe::p2p
