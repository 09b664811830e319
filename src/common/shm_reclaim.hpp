// The shared memory a killed job leaves behind. A process killed with SIGKILL frees
// nothing: its emulated device memory ("/gpustripe.<pid>.<n>") and any job or team
// segment it had not yet unlinked ("/gpustripe-<tag>-<pid>-<random>") stay in /dev/shm,
// holding memory until someone removes them. Every name carries its creator's pid, so a
// later process can tell that the creator is gone: the first gpustripe process of the
// next job removes them (reclaim_dead_segments_once), and `gpustripe cleanup` lists or
// removes them by hand.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gpustripe {

struct LeftSegment {
  std::string name;  // as shm_open takes it ("/gpustripe.123.4")
  uint64_t bytes = 0;
  int pid = 0;       // the process that made it, no longer running
};

// Where POSIX shared memory lives (shm_open's names are files there).
constexpr const char* kShmDir = "/dev/shm";

// gpustripe's segments in `dir` owned by this user whose creating process no longer
// runs. Segments of other users, names of other programs and segments of live processes
// are never listed (a pid reused by a live process keeps its segments until it ends).
std::vector<LeftSegment> dead_segments(const std::string& dir = kShmDir);
// Removes dead_segments(dir); returns those removed. Mappings other processes still hold
// stay valid (only the names go).
std::vector<LeftSegment> reclaim_dead_segments(const std::string& dir = kShmDir) noexcept;
// reclaim_dead_segments once per process (logged when it removed any): run where a
// process starts using shared memory (the emulated backend, the ipc channel).
void reclaim_dead_segments_once() noexcept;

}  // namespace gpustripe
