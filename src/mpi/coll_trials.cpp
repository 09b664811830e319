#include "mpi/coll_trials.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/config.hpp"

namespace gpustripe::mpi {

FormTrials::FormTrials(std::vector<std::string> forms, std::string what) : forms_(std::move(forms)), what_(std::move(what)) {
  GS_REQUIRE(forms_.size() >= 2, GPUSTRIPE_ERR_INTERNAL, "%s: trials of %zu forms", what_.c_str(), forms_.size());
}

int FormTrials::size_class(size_t bytes) {
  int c = 0;
  while (bytes > 1) {
    bytes >>= 1;
    ++c;
  }
  return c;
}

std::vector<uint64_t> FormTrials::samples(int cls, const std::string& form) const {
  std::vector<uint64_t> out;
  auto it = classes_.find(cls);
  auto f = std::find(forms_.begin(), forms_.end(), form);
  if (it == classes_.end() || f == forms_.end()) return out;
  const size_t fi = static_cast<size_t>(f - forms_.begin());
  for (const auto& [index, ns] : it->second.slowest)
    if (index % forms_.size() == fi) out.push_back(ns);
  return out;
}

const std::string* FormTrials::decided(int cls) const {
  auto it = classes_.find(cls);
  return it == classes_.end() || it->second.decided < 0 ? nullptr : &forms_[it->second.decided];
}

const std::string& FormTrials::next(int cls) {
  Class& c = classes_[cls];
  if (c.decided >= 0) return forms_[c.decided];
  std::vector<std::vector<uint64_t>> by_form;
  for (const std::string& f : forms_) by_form.push_back(samples(cls, f));
  const bool enough =
      std::all_of(by_form.begin(), by_form.end(), [](const auto& v) { return v.size() >= size_t(kTimed); });
  if (!enough && c.calls < kMostCalls) return forms_[c.calls % forms_.size()];
  if (!enough) {
    c.decided = 0;
    GS_LOG_INFO(Subsys::Mpi, "%s of %s-%s: %s, the first form: %u calls and too few timed on every rank",
                what_.c_str(), format_size(size_t(1) << cls).c_str(), format_size(size_t(2) << cls).c_str(),
                forms_[0].c_str(), c.calls);
    return forms_[0];
  }
  // The lower median: a disturbed call (another process, a page fault) only slows.
  std::vector<uint64_t> median;
  for (auto& v : by_form) {
    std::sort(v.begin(), v.end());
    median.push_back(v[(v.size() - 1) / 2]);
  }
  c.decided = static_cast<int>(std::min_element(median.begin(), median.end()) - median.begin());
  std::string times;
  for (size_t f = 0; f < forms_.size(); ++f) {
    times += format("%s%s", f ? "; " : "", forms_[f].c_str());
    for (uint64_t ns : by_form[f]) times += format(" %.1f", static_cast<double>(ns) / 1e3);
  }
  GS_LOG_INFO(Subsys::Mpi, "%s of %s-%s: %s, by the slowest rank's time of the trial calls (us: %s)", what_.c_str(),
              format_size(size_t(1) << cls).c_str(), format_size(size_t(2) << cls).c_str(),
              forms_[c.decided].c_str(), times.c_str());
  return forms_[c.decided];
}

int FormTrials::ran(int cls, const std::string& form) {
  Class& c = classes_[cls];
  const uint32_t index = c.calls++;
  if (c.decided >= 0) return -1;
  GS_REQUIRE(form == forms_[index % forms_.size()], GPUSTRIPE_ERR_INTERNAL,
             "%s: trial call %u of its class ran %s, not the form in turn", what_.c_str(), index, form.c_str());
  return index < forms_.size() ? -1 : static_cast<int>(index);
}

void FormTrials::timed(int cls, int index, uint64_t ns) {
  if (index < 0) return;
  posted_ = Posted{cls, static_cast<uint32_t>(index), std::max<uint64_t>(ns, 1)};
}

FormTrials::Posted FormTrials::take_posted() {
  Posted p = posted_;
  posted_ = Posted{};
  return p;
}

void FormTrials::record(const std::vector<Posted>& all) {
  if (all.empty() || all[0].cls < 0) return;
  uint64_t slowest = 0;
  for (const Posted& p : all) {
    if (p.cls != all[0].cls || p.index != all[0].index || p.ns == 0) return;
    slowest = std::max(slowest, p.ns);
  }
  auto it = classes_.find(all[0].cls);
  // A class this rank has not seen (ranks that disagree on the calls: nothing to record).
  if (it == classes_.end() || it->second.decided >= 0 || all[0].index >= it->second.calls) return;
  it->second.slowest.emplace(all[0].index, slowest);
}

}  // namespace gpustripe::mpi
