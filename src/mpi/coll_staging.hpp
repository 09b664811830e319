// The pinned host memory a collective team's processes share: the host path of its schedules
// (a broadcast's tail goes D2H by the root into it, H2D by the other ranks out of it).
//
// One buffer per team, owned by rank 0. It grows the buffer when a call's schedule asks for
// more (a new POSIX shared-memory segment replaces the old one, which no call uses any more:
// the caller settles first) and names it in its message of the call's entry exchange; every
// other rank maps the named segment before it builds that call's Program, and says in its next
// messages which one it has, so that rank 0 removes the name once every rank has mapped it (a
// killed job then leaves nothing, or a name with its creator's pid that the next job reclaims).
// Each process registers its mapping for its GPUs as the team's flag pages are
// (Backend::register_host: portable, mapped), so the copies run at the host links' speed;
// where the backend cannot, they still run, from pageable memory. A rank's Program is built
// over its own mapping and runs only its own ops, so every host pointer it holds is its own.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/backend.hpp"
#include "ipc/shm_segment.hpp"

namespace gpustripe::mpi {

class TeamStaging {
 public:
  // What a rank's message of the entry exchange says about the buffer: the owner's current
  // segment (name, bytes, generation: 0 none yet), and every rank's `seen`, the generation it
  // has mapped.
  struct Note {
    char name[64] = {};
    uint64_t bytes = 0;
    uint64_t generation = 0;
    uint64_t seen = 0;
  };

  TeamStaging(Backend& backend, bool owner) : backend_(backend), owner_(owner) {}
  ~TeamStaging();
  TeamStaging(const TeamStaging&) = delete;
  TeamStaging& operator=(const TeamStaging&) = delete;

  // Owner: at least `bytes` (a new segment of the next power of two from 1 MiB where the
  // current one is smaller). The caller has made sure that no call uses the current one.
  void grow(size_t bytes);
  // Not the owner: maps the segment `owner` names unless it is the one mapped here (the caller
  // has made sure that no call of this rank uses the current one).
  void follow(const Note& owner);
  // Owner: removes the segment's name (every rank has said it has the current generation).
  void forget_name() { seg_.unlink(); }
  // This rank's part of a message.
  Note note() const;

  char* data() const { return static_cast<char*>(seg_.data()); }
  size_t bytes() const { return seg_.size(); }
  uint64_t generation() const { return generation_; }

 private:
  void drop();  // unregisters and unmaps the current segment (its name too, if still ours)
  void pin();   // registers the current segment for the GPUs where the backend can (else pageable)
  Backend& backend_;
  bool owner_;
  ipc::ShmSegment seg_;
  bool registered_ = false;
  uint64_t generation_ = 0;
};

}  // namespace gpustripe::mpi
