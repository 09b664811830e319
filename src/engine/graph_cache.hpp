// Graph mode (CUDA backend, GPUSTRIPE_GRAPHS=1): the schedule of a transfer is captured
// once into a CUDA graph and replayed for repeated transfers with the same key
// (pointers, devices, size, plan), instead of issuing dozens of async calls.
//   GraphCache     bounded LRU of captured schedules; evicted graphs are destroyed.
//   ResourceTails  a replay runs on the caller's stream, not on the engine's lanes, so
//                  replays that share a staging area are ordered through the last
//                  replay's completion event on each area they use.
#pragma once
#include <list>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.hpp"

namespace gpustripe {

class GraphCache {
 public:
  GraphCache(Backend& backend, size_t capacity) : backend_(backend), capacity_(capacity) {}
  ~GraphCache();
  GraphExecHandle find(const std::string& key);  // nullptr when absent; marks it most recent
  void insert(const std::string& key, GraphExecHandle graph);
  size_t size() const { return lru_.size(); }

 private:
  Backend& backend_;
  size_t capacity_;
  std::list<std::pair<std::string, GraphExecHandle>> lru_;  // most recent first
  std::unordered_map<std::string, std::list<std::pair<std::string, GraphExecHandle>>::iterator> index_;
};

class ResourceTails {
 public:
  explicit ResourceTails(Backend& backend) : backend_(backend) {}
  ~ResourceTails();
  static int gpu_area(int g) { return g; }
  static int host_area(int index) { return 100000 + index; }
  // Makes `stream` wait for the last user of each resource.
  void wait(const std::set<int>& resources, StreamHandle stream);
  // The work enqueued on `stream` (a stream of `dev`) so far is the new last user.
  void record(const std::set<int>& resources, StreamHandle stream, int dev);
  // Blocks until every replay recorded so far has completed (engine teardown).
  void synchronize_all();

 private:
  Backend& backend_;
  std::map<std::pair<int, int>, EventHandle> events_;  // (resource, device) -> event
  std::map<int, EventHandle> last_;                    // resource -> event of its last user
};

}  // namespace gpustripe
