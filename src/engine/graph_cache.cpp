#include "engine/graph_cache.hpp"

namespace gpustripe {

GraphCache::~GraphCache() {
  for (auto& entry : lru_) backend_.destroy_graph(entry.second);
}

GraphExecHandle GraphCache::find(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void GraphCache::insert(const std::string& key, GraphExecHandle graph) {
  lru_.emplace_front(key, graph);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    // A launched graph may be destroyed while it runs: CUDA finishes the launch first.
    backend_.destroy_graph(lru_.back().second);
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

ResourceTails::~ResourceTails() {
  for (auto& e : events_) backend_.destroy_event(e.second);
}

void ResourceTails::wait(const std::set<int>& resources, StreamHandle stream) {
  for (int r : resources) {
    auto it = last_.find(r);
    if (it != last_.end()) backend_.wait_event(stream, it->second);
  }
}

void ResourceTails::record(const std::set<int>& resources, StreamHandle stream, int dev) {
  // One event per (resource, device), re-recorded by each replay: the new mark comes
  // after a wait on the old one, so it always covers every earlier user.
  for (int r : resources) {
    EventHandle& e = events_[{r, dev}];
    if (!e) e = backend_.create_event(dev, false);
    backend_.record_event(e, stream);
    last_[r] = e;
  }
}

void ResourceTails::synchronize_all() {
  for (auto& e : last_) backend_.synchronize_event(e.second);
}

}  // namespace gpustripe
