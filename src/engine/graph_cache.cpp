#include "engine/graph_cache.hpp"

namespace gpustripe {

GraphCache::~GraphCache() {
  for (auto& entry : lru_) backend_.destroy_graph(entry.graph);
}

GraphExecHandle GraphCache::find(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  ++it->second->launches;
  return it->second->graph;
}

void GraphCache::insert(const std::string& key, GraphExecHandle graph) {
  lru_.push_front(Entry{key, graph, 1});
  index_[key] = lru_.begin();
  ++inserted_;
  while (lru_.size() > capacity_) {
    // A launched graph may be destroyed while it runs: CUDA finishes the launch first.
    if (lru_.back().launches < 3) ++wasted_;
    backend_.destroy_graph(lru_.back().graph);
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

bool GraphCache::seen_before(const std::string& key) {
  if (seen_index_.count(key)) return true;
  seen_.push_back(key);
  seen_index_[key] = std::prev(seen_.end());
  while (seen_.size() > 4 * capacity_) {
    seen_index_.erase(seen_.front());
    seen_.pop_front();
  }
  return false;
}

ResourceTails::~ResourceTails() {
  for (auto& e : events_) backend_.destroy_event(e.second);
}

EventHandle ResourceTails::record(int resource, StreamHandle stream, int dev) {
  EventHandle& e = events_[{resource, dev}];
  if (!e) e = backend_.create_event(dev, false);
  backend_.record_event(e, stream);
  return e;
}

void ResourceTails::synchronize_all() {
  for (auto& e : events_) backend_.synchronize_event(e.second);
}

}  // namespace gpustripe
