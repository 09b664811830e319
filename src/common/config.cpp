#include "common/config.hpp"

#include <unistd.h>  // environ

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "common/error.hpp"

namespace gpustripe {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, SettingInfo> settings;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: settings outlive static destructors
  return *r;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Names with the prefix that no setting of this library declares but that are still
// meant: read by the build and test scripts rather than the library, or declared by a
// library loaded into some processes only (the MPI interposer: GPUSTRIPE_MPI*, checked
// where it is loaded, i.e. where a setting only it declares is registered; the core library
// declares some GPUSTRIPE_MPI_COLL_* settings of its own, for the teams it shares with Python).
const char* const kReadOutside[] = {"GPUSTRIPE_BUILD_DIR"};
// GPUSTRIPE_TEST_* variables are read by test programs and scripts alone.
const char* const kReadOutsidePrefixes[] = {"GPUSTRIPE_TEST_"};
struct LoadedLater {
  const char* prefix;
  const char* marker;  // a setting its library alone declares
};
const LoadedLater kLoadedLater[] = {{"GPUSTRIPE_MPI", "GPUSTRIPE_MPI"}};

bool starts_with(const std::string& s, const char* prefix) { return s.compare(0, std::strlen(prefix), prefix) == 0; }

void warn_unknown_once();

const char* env_value(const std::string& name) {
  warn_unknown_once();
  const char* v = std::getenv(name.c_str());
  return (v && *v) ? v : nullptr;
}

// Once per process, at the first read of a setting (when every library loaded so far has
// registered its settings): a misspelled name would otherwise be ignored without a word.
// Printed to stderr directly, not through the log, whose own setup reads settings.
void warn_unknown_once() {
  static std::atomic<bool> done{false};
  // A plain load first: settings are read on hot paths, and from many threads.
  if (done.load(std::memory_order_relaxed) || done.exchange(true)) return;
  std::vector<std::string> unknown = unknown_setting_names();
  if (unknown.empty()) return;
  std::string list;
  for (const std::string& n : unknown) list += (list.empty() ? "" : ", ") + n;
  std::fprintf(stderr,
               "gpustripe: warning: %s set in the environment but not a gpustripe setting (misspelled?); "
               "`gpustripe config` lists the settings\n",
               list.c_str());
}

}  // namespace

const char* setting_type_name(SettingType type) {
  switch (type) {
    case SettingType::Bool: return "bool";
    case SettingType::Int: return "int";
    case SettingType::Size: return "size";
    case SettingType::Double: return "double";
    case SettingType::String: return "string";
    case SettingType::Choice: return "choice";
  }
  return "?";
}

std::string SettingInfo::current_value() const {
  const char* v = env_value(name);
  return v ? std::string(v) : default_value;
}

bool SettingInfo::is_set() const { return env_value(name) != nullptr; }

std::vector<std::string> unknown_setting_names() {
  std::vector<std::string> names;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    std::string name(*e, eq ? static_cast<size_t>(eq - *e) : std::strlen(*e));
    if (starts_with(name, "GPUSTRIPE_")) names.push_back(name);
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (const std::string& name : names) {
    if (r.settings.count(name)) continue;
    bool meant = false;
    for (const char* n : kReadOutside) meant = meant || name == n;
    for (const char* p : kReadOutsidePrefixes) meant = meant || starts_with(name, p);
    for (const LoadedLater& l : kLoadedLater)
      meant = meant || (starts_with(name, l.prefix) && !r.settings.count(l.marker));  // its library is not loaded
    if (!meant) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string settings_environment() {
  std::string out;
  for (char** e = environ; e && *e; ++e)
    if (starts_with(*e, "GPUSTRIPE_")) {
      out += *e;
      out += '\n';
    }
  return out;
}

std::string environment_variable(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::vector<SettingInfo> all_settings() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<SettingInfo> out;
  for (auto& kv : r.settings) out.push_back(kv.second);
  return out;
}

bool parse_bool(const std::string& text, const std::string& what) {
  std::string t = lower(trim(text));
  if (t == "1" || t == "y" || t == "yes" || t == "on" || t == "true") return true;
  if (t == "0" || t == "n" || t == "no" || t == "off" || t == "false") return false;
  GS_THROW(GPUSTRIPE_ERR_CONFIG, "%s: '%s' is not a boolean (use 1/0, yes/no, on/off, true/false)", what.c_str(),
           text.c_str());
}

int64_t parse_int(const std::string& text, const std::string& what) {
  std::string t = trim(text);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(t.c_str(), &end, 0);
  if (t.empty() || errno != 0 || *end != '\0')
    GS_THROW(GPUSTRIPE_ERR_CONFIG, "%s: '%s' is not an integer", what.c_str(), text.c_str());
  return v;
}

uint64_t parse_size(const std::string& text, const std::string& what) {
  std::string t = trim(text);
  if (t.empty() || t[0] == '-') GS_THROW(GPUSTRIPE_ERR_CONFIG, "%s: '%s' is not a size", what.c_str(), text.c_str());
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (errno != 0 || end == t.c_str() || !std::isfinite(v) || v < 0)
    GS_THROW(GPUSTRIPE_ERR_CONFIG, "%s: '%s' is not a size (bytes, or with K/M/G/T)", what.c_str(), text.c_str());
  std::string suffix = lower(trim(end));
  if (!suffix.empty() && suffix.back() == 'b') suffix.pop_back();   // 256MB, 4kb
  if (!suffix.empty() && suffix.back() == 'i') suffix.pop_back();   // 256Mi
  double mult = 1;
  if (suffix.empty()) mult = 1;
  else if (suffix == "k") mult = 1024.0;
  else if (suffix == "m") mult = 1024.0 * 1024;
  else if (suffix == "g") mult = 1024.0 * 1024 * 1024;
  else if (suffix == "t") mult = 1024.0 * 1024 * 1024 * 1024;
  else GS_THROW(GPUSTRIPE_ERR_CONFIG, "%s: '%s' has an unknown size suffix (use K, M, G or T)", what.c_str(), text.c_str());
  double bytes = v * mult;
  if (bytes > 1.8e19 || bytes != std::floor(bytes))
    GS_THROW(GPUSTRIPE_ERR_CONFIG, "%s: '%s' is not a whole number of bytes", what.c_str(), text.c_str());
  return static_cast<uint64_t>(bytes);
}

double parse_double(const std::string& text, const std::string& what) {
  std::string t = trim(text);
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (t.empty() || errno != 0 || *end != '\0' || !std::isfinite(v))
    GS_THROW(GPUSTRIPE_ERR_CONFIG, "%s: '%s' is not a number", what.c_str(), text.c_str());
  return v;
}

std::string format_size(uint64_t bytes) {
  static const char* units[] = {"T", "G", "M", "K"};
  static const int shifts[] = {40, 30, 20, 10};
  for (int i = 0; i < 4; ++i) {
    uint64_t unit = 1ull << shifts[i];
    if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + units[i];
  }
  return std::to_string(bytes);
}

SettingBase::SettingBase(const char* name, SettingType type, const char* default_value, const char* description,
                         std::vector<std::string> choices)
    : name_(name), default_(default_value) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  SettingInfo info{name, type, default_value, description, std::move(choices)};
  auto it = r.settings.find(name);
  // One declaration per name: a second one with another default is a programming error.
  if (it != r.settings.end() && it->second.default_value != info.default_value) std::abort();
  r.settings[name] = std::move(info);
}

std::string SettingBase::text() const {
  const char* v = env_value(name_);
  return v ? std::string(v) : std::string(default_);
}

namespace {
const StringSetting kTest{"GPUSTRIPE_TEST", "",
                          "Test hooks of the project's own tests, as key=value items separated by commas: "
                          "fake_nodes=N (the MPI interposer pretends the ranks sit on N nodes), alloc=plain|vmm|pool|"
                          "async|vmm_multi (the MPI test programs' device buffers), emu_jitter_us=N and emu_gbps=X "
                          "(emulated streams: random delays, copy bandwidth), window_min=SIZE (p2p windows of messages "
                          "from this size), offers=no (p2p: no device receive offered to its sender), coll.NAME=VALUE (the interposer teams' coll::Tuning field NAME, or "
                          "coll.peer_kernels=yes|no); empty: none"};
const char* const kTestKeys[] = {"fake_nodes", "alloc", "emu_jitter_us", "emu_gbps", "window_min", "offers"};
constexpr const char* kTestGroups[] = {"coll."};  // keys of a prefix: their owner checks the names

// Every item of GPUSTRIPE_TEST as (key, value), each key checked.
std::vector<std::pair<std::string, std::string>> test_items() {
  const std::string text = kTest.get();
  std::vector<std::pair<std::string, std::string>> items;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string item = trim(text.substr(at, end - at));
    at = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string k = trim(item.substr(0, eq));
    bool known = false;
    for (const char* t : kTestKeys) known = known || k == t;
    for (const char* g : kTestGroups) known = known || (k.size() > std::strlen(g) && k.compare(0, std::strlen(g), g) == 0);
    if (eq == std::string::npos || !known) {
      std::string keys;
      for (const char* t : kTestKeys) keys += (keys.empty() ? "" : ", ") + std::string(t);
      for (const char* g : kTestGroups) keys += ", " + std::string(g) + "NAME";
      GS_THROW(GPUSTRIPE_ERR_CONFIG, "GPUSTRIPE_TEST: '%s' is not key=value with a key of: %s", item.c_str(),
               keys.c_str());
    }
    items.emplace_back(k, trim(item.substr(eq + 1)));
  }
  return items;
}
}  // namespace

std::string test_hook(const char* key, const char* fallback) {
  std::string value = fallback;
  for (const auto& [k, v] : test_items())
    if (k == key) value = v;
  return value;
}

std::vector<std::pair<std::string, std::string>> test_hooks(const char* prefix) {
  std::vector<std::pair<std::string, std::string>> out;
  const size_t n = std::strlen(prefix);
  for (const auto& [k, v] : test_items())
    if (k.compare(0, n, prefix) == 0) out.emplace_back(k.substr(n), v);
  return out;
}

ChoiceSetting::ChoiceSetting(const char* name, const char* def, const char* desc, std::vector<std::string> choices)
    : SettingBase(name, SettingType::Choice, def, desc, choices), choices_(std::move(choices)) {}

std::string ChoiceSetting::get() const {
  std::string v = lower(trim(text()));
  for (auto& c : choices_)
    if (v == c) return c;
  std::string list;
  for (auto& c : choices_) list += (list.empty() ? "" : ", ") + c;
  GS_THROW(GPUSTRIPE_ERR_CONFIG, "%s: '%s' is not one of: %s", name_, text().c_str(), list.c_str());
}

}  // namespace gpustripe
