// Graph mode (backends that replay graphs, EngineOptions::graphs): the schedule of a transfer is captured
// once into a CUDA graph and replayed for repeated transfers with the same key
// (pointers, devices, size, plan), instead of issuing dozens of async calls.
//   GraphCache     bounded LRU of captured schedules; evicted graphs are destroyed. It also
//                  remembers the keys it has seen, so a transfer is captured the second time,
//                  and tells when the working set outgrows it (graphs evicted before they
//                  were replayed twice: capturing then costs more than it saves).
//   ResourceTails  a replay runs on the caller's stream, not on the engine's lanes: its end
//                  is marked by an event per staging area it uses (and the caller's device),
//                  which the area's StagingUses then hold for every later user.
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
  // True when `key` was passed here before (among the last 4 x capacity keys); remembers it.
  bool seen_before(const std::string& key);
  // At least 16 graphs, and half of all captured, were evicted before their third launch.
  bool thrashing() const { return wasted_ >= 16 && 2 * wasted_ >= inserted_; }

 private:
  struct Entry {
    std::string key;
    GraphExecHandle graph;
    uint64_t launches;  // the launch right after the capture included
  };
  Backend& backend_;
  size_t capacity_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  uint64_t inserted_ = 0, wasted_ = 0;
  std::list<std::string> seen_;  // oldest first
  std::unordered_map<std::string, std::list<std::string>::iterator> seen_index_;
};

class ResourceTails {
 public:
  explicit ResourceTails(Backend& backend) : backend_(backend) {}
  ~ResourceTails();
  static int gpu_area(int g) { return g; }
  static int host_area(int index) { return 100000 + index; }
  // Marks the work enqueued on `stream` (a stream of `dev`) so far with the event of
  // (resource, dev), re-recorded by each replay: the replay waited for every earlier user
  // of the resource, so the new mark covers them all.
  EventHandle record(int resource, StreamHandle stream, int dev);
  // Blocks until every replay recorded so far has completed (engine teardown).
  void synchronize_all();

 private:
  Backend& backend_;
  std::map<std::pair<int, int>, EventHandle> events_;  // (resource, device) -> event
};

}  // namespace gpustripe
