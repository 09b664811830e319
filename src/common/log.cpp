#include "common/log.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "common/config.hpp"
#include "common/error.hpp"

namespace gpustripe {
namespace {

const ChoiceSetting kLogLevel{"GPUSTRIPE_LOG_LEVEL", "warn", "Least severe log message printed",
                              {"error", "warn", "info", "debug", "trace"}};
const StringSetting kLogSubsys{"GPUSTRIPE_LOG_SUBSYS", "all",
                               "Subsystems that log: all, or a comma list of api,config,topology,model,backend,"
                               "engine,ipc,p2p,coll,mpi,bench"};
const StringSetting kLogFile{"GPUSTRIPE_LOG_FILE", "", "Log file (\"%p\" becomes the process id); empty: stderr"};

const char* kSubsysNames[] = {"api", "config", "topology", "model", "backend", "engine",
                              "ipc", "p2p",    "coll",     "mpi",   "bench"};
const char* kLevelNames[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

std::mutex g_mu;
FILE* g_out = nullptr;

}  // namespace

const char* subsys_name(Subsys s) {
  int i = static_cast<int>(s);
  return (i >= 0 && i < static_cast<int>(Subsys::Count)) ? kSubsysNames[i] : "?";
}

namespace log_detail {
std::atomic<int> g_level{-1};
std::atomic<unsigned> g_mask{~0u};

void init_once() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_level.load() >= 0) return;
  int level = 1;
  unsigned mask = ~0u;
  std::string bad;
  try {
    std::string l = kLogLevel.get();
    for (int i = 0; i < 5; ++i)
      if (l == std::string(kLevelNames[i]).c_str() || strcasecmp(l.c_str(), kLevelNames[i]) == 0) level = i;
  } catch (const Error& e) {
    bad = e.what();
  }
  std::string subs = kLogSubsys.get();
  if (subs != "all" && !subs.empty()) {
    mask = 0;
    size_t pos = 0;
    while (pos <= subs.size()) {
      size_t comma = subs.find(',', pos);
      std::string word = subs.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      bool found = false;
      for (int i = 0; i < static_cast<int>(Subsys::Count); ++i)
        if (word == kSubsysNames[i]) mask |= 1u << i, found = true;
      if (!found && !word.empty()) bad += (bad.empty() ? "" : "; ") + std::string("GPUSTRIPE_LOG_SUBSYS: unknown subsystem '") + word + "'";
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  if (g_out && g_out != stderr) std::fclose(g_out);
  g_out = stderr;
  std::string path = kLogFile.get();
  if (!path.empty()) {
    size_t p = path.find("%p");
    if (p != std::string::npos) path.replace(p, 2, std::to_string(getpid()));
    FILE* f = std::fopen(path.c_str(), "a");
    if (f) g_out = f;
    else bad += (bad.empty() ? "" : "; ") + std::string("GPUSTRIPE_LOG_FILE: cannot open '") + path + "'";
  }
  g_mask.store(mask);
  g_level.store(level);
  // Bad logging settings must not stop the library; they are reported once, loudly.
  if (!bad.empty()) std::fprintf(g_out, "[gpustripe WARN config] %s\n", bad.c_str());
}

void emit(LogLevel level, Subsys subsys, const char* file, int line, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char msg[2048];
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char* base = std::strrchr(file, '/');
  double t = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(g_out ? g_out : stderr, "[gpustripe %d %.6f %s %s %s:%d] %s\n", static_cast<int>(getpid()), t,
               kLevelNames[static_cast<int>(level)], subsys_name(subsys), base ? base + 1 : file, line, msg);
  std::fflush(g_out ? g_out : stderr);
}
}  // namespace log_detail

void log_reconfigure() {
  log_detail::g_level.store(-1);
  log_detail::init_once();
}

}  // namespace gpustripe
