#include "model/plan_spec.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "common/error.hpp"
#include "model/multipath_model.hpp"
#include "model/plan_search.hpp"

namespace gpustripe {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

int parse_index(const std::string& digits, const std::string& term) {
  GS_REQUIRE(!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos, GPUSTRIPE_ERR_CONFIG,
             "plan spec term '%s': expected a device or socket number after the path name", term.c_str());
  return std::atoi(digits.c_str());
}

SpecTerm parse_term(const std::string& raw) {
  const std::string term = trim(raw);
  SpecTerm t;
  std::string rest = term;
  size_t x = rest.rfind('x');
  if (x != std::string::npos && x + 1 < rest.size() && std::isdigit(static_cast<unsigned char>(rest[x + 1]))) {
    // "x" chunks ["h" head] ["t" tail]
    auto number = [&](size_t& at) {
      size_t end = rest.find_first_not_of("0123456789", at);
      if (end == std::string::npos) end = rest.size();
      GS_REQUIRE(end > at, GPUSTRIPE_ERR_CONFIG, "plan spec term '%s': expected a number after '%c'", term.c_str(),
                 rest[at - 1]);
      int v = std::atoi(rest.substr(at, std::min<size_t>(end - at, 6)).c_str());
      at = end;
      return v;
    };
    size_t at = x + 1;
    t.chunks = number(at);
    GS_REQUIRE(t.chunks >= 1 && t.chunks <= 4096, GPUSTRIPE_ERR_CONFIG, "plan spec term '%s': chunks must be 1-4096",
               term.c_str());
    if (at < rest.size() && rest[at] == 'h') t.taper_head = number(++at);
    if (at < rest.size() && rest[at] == 't') t.taper_tail = number(++at);
    GS_REQUIRE(at == rest.size(), GPUSTRIPE_ERR_CONFIG,
               "plan spec term '%s': after 'x' comes the chunk count, then optionally h<head> and t<tail> "
               "(tapered chunks, e.g. host0:0.1x8h2)", term.c_str());
    GS_REQUIRE(t.taper_head <= kMaxTaper && t.taper_tail <= kMaxTaper &&
                   (t.taper_head + t.taper_tail == 0 || t.taper_head + t.taper_tail < t.chunks),
               GPUSTRIPE_ERR_CONFIG, "plan spec term '%s': the tapered chunks (h%d t%d) must be fewer than the chunks "
               "and at most %d each", term.c_str(), t.taper_head, t.taper_tail, kMaxTaper);
    rest = rest.substr(0, x);
  }
  size_t colon = rest.find(':');
  std::string path = rest.substr(0, colon);
  if (colon != std::string::npos) {
    const std::string s = rest.substr(colon + 1);
    char* end = nullptr;
    t.share = std::strtod(s.c_str(), &end);
    GS_REQUIRE(!s.empty() && end && *end == '\0' && t.share > 0 && t.share <= 1, GPUSTRIPE_ERR_CONFIG,
               "plan spec term '%s': the share must be a fraction in (0, 1]", term.c_str());
  }
  if (path == "direct") {
    t.kind = PathKind::Direct;
  } else if (path.rfind("gpu", 0) == 0) {
    t.kind = PathKind::GpuStaged;
    t.via = parse_index(path.substr(3), term);
  } else if (path.rfind("host", 0) == 0) {
    t.kind = PathKind::HostStaged;
    t.via = parse_index(path.substr(4), term);
  } else {
    GS_THROW(GPUSTRIPE_ERR_CONFIG, "plan spec term '%s': unknown path (use direct, gpu<N> or host<S>, e.g. "
             "'direct,host0:0.095x8,gpu2:0.1x4')", term.c_str());
  }
  return t;
}

}  // namespace

std::vector<SpecTerm> parse_plan_spec(const std::string& text) {
  std::vector<SpecTerm> out;
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    std::string piece = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    GS_REQUIRE(!trim(piece).empty(), GPUSTRIPE_ERR_CONFIG, "plan spec '%s' has an empty term", text.c_str());
    out.push_back(parse_term(piece));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  int rest = 0;
  double sum = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].share < 0) ++rest;
    else sum += out[i].share;
    for (size_t j = 0; j < i; ++j)
      GS_REQUIRE(!(out[j].kind == out[i].kind && out[j].via == out[i].via), GPUSTRIPE_ERR_CONFIG,
                 "plan spec '%s' names a path twice", text.c_str());
  }
  GS_REQUIRE(rest <= 1, GPUSTRIPE_ERR_CONFIG, "plan spec '%s': at most one term may omit its share", text.c_str());
  if (rest == 1)
    GS_REQUIRE(sum < 1.0, GPUSTRIPE_ERR_CONFIG, "plan spec '%s': the shares add up to %.4f, nothing is left for the rest",
               text.c_str(), sum);
  else
    GS_REQUIRE(std::fabs(sum - 1.0) < 1e-3, GPUSTRIPE_ERR_CONFIG, "plan spec '%s': the shares add up to %.4f, not 1",
               text.c_str(), sum);
  return out;
}

std::string format_plan_spec(const Plan& plan) {
  std::string out;
  for (const PathPlan& p : plan.paths) {
    if (!out.empty()) out += ",";
    out += p.kind == PathKind::Direct ? std::string("direct") : std::string(path_kind_name(p.kind)) + std::to_string(p.via);
    out += format(":%.4fx%d", plan.bytes ? static_cast<double>(p.bytes) / static_cast<double>(plan.bytes) : 0.0,
                  p.chunks);
    if (p.taper_head) out += format("h%d", p.taper_head);
    if (p.taper_tail) out += format("t%d", p.taper_tail);
  }
  return out;
}

Plan build_fixed_plan(const MultipathModel& model, const std::vector<SpecTerm>& spec, int src, int dst, uint64_t bytes,
                      uint64_t align) {
  model.node().routes(src, dst);  // validates the pair
  GS_REQUIRE(bytes > 0, GPUSTRIPE_ERR_INVALID_SIZE, "transfer %d->%d of 0 bytes: nothing to plan", src, dst);
  std::vector<SpecTerm> usable;
  for (const SpecTerm& t : spec)
    if (model.node().route(src, dst, t.kind, t.via)) usable.push_back(t);
  GS_REQUIRE(!usable.empty(), GPUSTRIPE_ERR_NOT_SUPPORTED, "plan spec has no path that transfer %d->%d can take", src,
             dst);
  // The rest term (or the first, when every term has a share) absorbs rounding and dropped terms.
  size_t rest = 0;
  for (size_t i = 0; i < usable.size(); ++i)
    if (usable[i].share < 0) rest = i;
  Plan plan;
  plan.src = src;
  plan.dst = dst;
  plan.bytes = bytes;
  plan.source = "fixed";
  std::vector<uint64_t> b(usable.size(), 0);
  uint64_t given = 0;
  for (size_t i = 0; i < usable.size(); ++i) {
    if (i == rest) continue;
    b[i] = static_cast<uint64_t>(std::llround(usable[i].share * static_cast<double>(bytes) / static_cast<double>(align))) * align;
    if (given + b[i] >= bytes) b[i] = 0;
    given += b[i];
  }
  b[rest] = bytes - given;
  // The rest term first, so that its unaligned tail can move to the last path.
  std::rotate(usable.begin(), usable.begin() + static_cast<long>(rest), usable.begin() + static_cast<long>(rest) + 1);
  std::rotate(b.begin(), b.begin() + static_cast<long>(rest), b.begin() + static_cast<long>(rest) + 1);
  align_boundaries(b, align);
  uint64_t offset = 0;
  for (size_t i = 0; i < usable.size(); ++i) {
    if (b[i] == 0) continue;
    PathPlan p;
    p.kind = usable[i].kind;
    p.via = usable[i].via;
    p.offset = offset;
    p.bytes = b[i];
    int chunks = usable[i].chunks > 0 ? usable[i].chunks : (p.kind == PathKind::Direct ? 1 : 8);
    p.chunks = static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(static_cast<uint64_t>(chunks), p.bytes)));
    // A path cut to fewer chunks than its spec keeps what taper still fits.
    p.taper_head = std::min(usable[i].taper_head, p.chunks - 1);
    p.taper_tail = std::min(usable[i].taper_tail, std::max(0, p.chunks - 1 - p.taper_head));
    offset += p.bytes;
    plan.paths.push_back(p);
  }
  model.predict(plan);
  return plan;
}

}  // namespace gpustripe
