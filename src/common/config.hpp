// Every GPUSTRIPE_* environment variable is declared exactly once, as a Setting
// object at namespace scope in the layer that uses it (name, type, default,
// description, parser). Declaring it registers it, so `gpustripe config` and
// gpustripe_config_dump() list all of them with their current values, the way
// `ucx_info -c` prints UCX's config tables.
//
//   static const gpustripe::SizeSetting kChunk{"GPUSTRIPE_CHUNK_MIN", "1M",
//       "Smallest pipeline chunk"};
//   size_t c = kChunk.get();   // parses the environment; throws ERR_CONFIG on bad input
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gpustripe {

enum class SettingType { Bool, Int, Size, Double, String, Choice };

struct SettingInfo {
  std::string name;
  SettingType type;
  std::string default_value;
  std::string description;
  std::vector<std::string> choices;  // Choice only
  std::string current_value() const;  // the environment's value, or the default
  bool is_set() const;                // the environment sets it
};

// All declared settings, sorted by name.
std::vector<SettingInfo> all_settings();
// GPUSTRIPE_* names of the environment that no loaded library declares (misspellings),
// sorted. The first read of any setting prints them once per process as a warning.
std::vector<std::string> unknown_setting_names();
const char* setting_type_name(SettingType type);

// Every read of the process environment is in this module; beside the settings, two more:
// Every GPUSTRIPE_* variable of the environment, one "NAME=value" a line: a key that changes
// whenever the value of any setting does (for caches of choices that read settings).
std::string settings_environment();
// A variable that is not a gpustripe setting (HOME, XDG_CACHE_HOME, another library's variable
// a report names): its value, or "" when unset.
std::string environment_variable(const char* name);

// GPUSTRIPE_TEST: the hooks of the project's own tests, in one setting of "key=value" items
// separated by commas ("fake_nodes=2,alloc=vmm"):
//   fake_nodes=N     the MPI interposer pretends the ranks sit on N nodes (contiguous blocks),
//                    so the inter-node path runs on one machine (0: the real nodes)
//   alloc=KIND       the allocator of the MPI test programs' device buffers (gpustripe_mpi_test_alloc):
//                    plain, vmm, pool, async or vmm_multi
//   emu_jitter_us=N  emulated backend: a random 0..N us sleep before each stream operation, so
//                    completions reorder across streams
//   emu_gbps=X       emulated backend: one copy's bandwidth in GB/s (0: memcpy speed)
//   window_min=SIZE  the p2p layer runs windows of messages from this size on (128M), so
//                    tests reach them with small messages
//   offers=no        the p2p layer offers no device receive to its sender (p2p/frame.hpp), so
//                    tests of the receiver's mappings reach the pull every time
//   coll.NAME=VALUE  the interposer teams' coll::Tuning field NAME (coll.peer_kernels=yes|no:
//                    kernels that read peers' buffers), so tests reach schedules at small sizes
// The value of `key`, or `fallback` where the setting does not name it. Throws Error(ERR_CONFIG)
// for an item that is not key=value or names another key.
std::string test_hook(const char* key, const char* fallback);
// The items whose key starts with `prefix` ("coll."), as (key less the prefix, value), in order.
std::vector<std::pair<std::string, std::string>> test_hooks(const char* prefix);

// Parsers shared by settings, CLI arguments and files. Each throws
// Error(ERR_CONFIG) naming `what` when the text does not parse.
bool parse_bool(const std::string& text, const std::string& what);
int64_t parse_int(const std::string& text, const std::string& what);
// Sizes: plain bytes or with a K/M/G/T suffix (binary, 1K = 1024), e.g. "256M", "1G", "4096".
uint64_t parse_size(const std::string& text, const std::string& what);
double parse_double(const std::string& text, const std::string& what);
// "268435456" -> "256M"; exact binary multiples get a suffix, others stay in bytes.
std::string format_size(uint64_t bytes);

class SettingBase {
 public:
  SettingBase(const char* name, SettingType type, const char* default_value, const char* description,
              std::vector<std::string> choices = {});
  const char* name() const { return name_; }
  // The raw text: the environment's value when set and non-empty, else the default.
  std::string text() const;

 protected:
  const char* name_;
  const char* default_;
};

class BoolSetting : public SettingBase {
 public:
  BoolSetting(const char* name, const char* def, const char* desc) : SettingBase(name, SettingType::Bool, def, desc) {}
  bool get() const { return parse_bool(text(), name_); }
};

class IntSetting : public SettingBase {
 public:
  IntSetting(const char* name, const char* def, const char* desc) : SettingBase(name, SettingType::Int, def, desc) {}
  int64_t get() const { return parse_int(text(), name_); }
};

class SizeSetting : public SettingBase {
 public:
  SizeSetting(const char* name, const char* def, const char* desc) : SettingBase(name, SettingType::Size, def, desc) {}
  uint64_t get() const { return parse_size(text(), name_); }
};

class DoubleSetting : public SettingBase {
 public:
  DoubleSetting(const char* name, const char* def, const char* desc)
      : SettingBase(name, SettingType::Double, def, desc) {}
  double get() const { return parse_double(text(), name_); }
};

class StringSetting : public SettingBase {
 public:
  StringSetting(const char* name, const char* def, const char* desc)
      : SettingBase(name, SettingType::String, def, desc) {}
  std::string get() const { return text(); }
};

// One of a fixed set of words; get() returns the word, rejecting others with the list.
class ChoiceSetting : public SettingBase {
 public:
  ChoiceSetting(const char* name, const char* def, const char* desc, std::vector<std::string> choices);
  std::string get() const;

 private:
  std::vector<std::string> choices_;
};

}  // namespace gpustripe
