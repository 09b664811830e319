#include "topology/json_locator.hpp"

#include <set>

namespace gpustripe {

std::string member_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}
std::string element_path(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

namespace {

class Scanner {
 public:
  Scanner(const std::string& t, std::map<std::string, int>& lines, std::optional<std::string>& dup)
      : t_(t), lines_(lines), dup_(dup) {}

  void value(const std::string& path) {
    skip_ws();
    lines_.emplace(path, line_);
    if (pos_ >= t_.size()) return;
    char c = t_[pos_];
    if (c == '{') object(path);
    else if (c == '[') array(path);
    else if (c == '"') string();
    else scalar();
  }

 private:
  void skip_ws() {
    while (pos_ < t_.size() && (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\r' || t_[pos_] == '\n')) {
      if (t_[pos_] == '\n') ++line_;
      ++pos_;
    }
  }
  // Returns the raw (still escaped) contents; keys of a schema need no unescaping,
  // and an escaped key is compared escaped on both sides, which is enough for duplicates.
  std::string string() {
    size_t start = ++pos_;
    while (pos_ < t_.size() && t_[pos_] != '"') pos_ += (t_[pos_] == '\\') ? 2 : 1;
    std::string s = t_.substr(start, pos_ - start);
    ++pos_;
    return s;
  }
  void scalar() {
    while (pos_ < t_.size() && t_[pos_] != ',' && t_[pos_] != '}' && t_[pos_] != ']' && t_[pos_] != ' ' &&
           t_[pos_] != '\n' && t_[pos_] != '\t' && t_[pos_] != '\r')
      ++pos_;
  }
  void object(const std::string& path) {
    ++pos_;
    std::set<std::string> seen;
    for (;;) {
      skip_ws();
      if (pos_ >= t_.size() || t_[pos_] == '}') break;
      std::string key = string();
      std::string p = member_path(path, key);
      if (!seen.insert(key).second && !dup_) dup_ = p;
      skip_ws();
      ++pos_;  // ':'
      value(p);
      skip_ws();
      if (pos_ < t_.size() && t_[pos_] == ',') ++pos_;
    }
    ++pos_;
  }
  void array(const std::string& path) {
    ++pos_;
    for (size_t i = 0;; ++i) {
      skip_ws();
      if (pos_ >= t_.size() || t_[pos_] == ']') break;
      value(element_path(path, i));
      skip_ws();
      if (pos_ < t_.size() && t_[pos_] == ',') ++pos_;
    }
    ++pos_;
  }

  const std::string& t_;
  std::map<std::string, int>& lines_;
  std::optional<std::string>& dup_;
  size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace

JsonLocator::JsonLocator(const std::string& text) { Scanner(text, lines_, duplicate_).value(""); }

int JsonLocator::line_of(const std::string& path) const {
  std::string p = path;
  for (;;) {
    auto it = lines_.find(p);
    if (it != lines_.end()) return it->second;
    if (p.empty()) return 1;
    size_t cut = p.find_last_of(".[");
    p = cut == std::string::npos ? std::string() : p.substr(0, cut);
  }
}

}  // namespace gpustripe
