// Command-line reading shared by the MPI benchmark clients (plain C++, nothing of gpustripe).
// A value that does not parse is an error through the client's usage(), never a silent zero
// (std::atoi("8x") is 8, std::atoi("x") is 0).
#pragma once
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

// "64K", "1M", "1G", "8": bytes (powers of 1024). False when the text is not a size.
inline bool parse_bytes(const std::string& text, size_t* out) {
  if (text.empty() || text[0] == '-') return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || !(v >= 0)) return false;
  std::string suffix(end);
  if (suffix == "K" || suffix == "k") v *= 1024;
  else if (suffix == "M" || suffix == "m") v *= 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g") v *= 1024.0 * 1024 * 1024;
  else if (!suffix.empty()) return false;
  if (v > 1.8e19) return false;
  *out = static_cast<size_t>(v);
  return true;
}

// A whole number. False when the text is not one.
inline bool parse_long(const std::string& text, long* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split_list(const std::string& text, char sep = ',') {
  std::vector<std::string> out;
  for (size_t p = 0; p <= text.size();) {
    size_t q = text.find(sep, p);
    if (q == std::string::npos) q = text.size();
    if (q > p) out.push_back(text.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

// Walks argv one option at a time; each value is checked as it is taken:
//
//   for (ArgWalk a(argc, argv, usage); a.next();) {
//     if (a.is("--min")) o.min_bytes = a.bytes();
//     else if (a.is("--iters")) o.iters = a.integer(0);
//     else if (a.is("--staged")) o.staged = true;   // a flag: no value taken
//     else a.unknown();
//   }
//
// `usage(why)` prints why and the client's usage, and ends the job (it does not return).
class ArgWalk {
 public:
  using Usage = void (*)(const char* why);
  ArgWalk(int argc, char** argv, Usage usage) : argc_(argc), argv_(argv), usage_(usage) {}

  bool next() {
    if (++i_ >= argc_) return false;
    name_ = argv_[i_];
    return true;
  }
  bool is(const char* name) const { return name_ == name; }
  const std::string& name() const { return name_; }

  // The option's value (the next argument).
  std::string text() {
    if (i_ + 1 >= argc_) fail("needs a value");
    return argv_[++i_];
  }
  // An integer value, at least `min`.
  long integer(long min) {
    std::string t = text();
    long v = 0;
    if (!parse_long(t, &v)) fail("'" + t + "' is not a whole number");
    if (v < min) fail("'" + t + "' is below " + std::to_string(min));
    return v;
  }
  // A size in bytes ("64K", "1M", "8").
  size_t bytes() {
    std::string t = text();
    size_t v = 0;
    if (!parse_bytes(t, &v)) fail("'" + t + "' is not a size (bytes, or with K, M or G)");
    return v;
  }
  // One of `words`.
  std::string choice(const std::vector<std::string>& words) {
    std::string t = text();
    std::string all;
    for (const std::string& w : words) {
      if (t == w) return t;
      all += (all.empty() ? "" : ", ") + w;
    }
    fail("'" + t + "' is not one of " + all);
  }
  // A comma-separated value.
  std::vector<std::string> list() { return split_list(text()); }

  [[noreturn]] void unknown() const { stop("unknown option " + name_); }
  [[noreturn]] void fail(const std::string& why) const { stop(name_ + ": " + why); }

 private:
  [[noreturn]] void stop(const std::string& why) const {
    usage_(why.c_str());
    std::abort();  // usage() ends the job; this is not reached
  }

  int argc_;
  char** argv_;
  Usage usage_;
  int i_ = 0;
  std::string name_;
};
