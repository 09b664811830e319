// Logging with levels and subsystems.
//   GPUSTRIPE_LOG_LEVEL  error|warn|info|debug|trace (default warn)
//   GPUSTRIPE_LOG_SUBSYS all, or a comma list: api,config,topology,model,backend,engine,ipc,p2p,coll,mpi,bench
//   GPUSTRIPE_LOG_FILE   path; "%p" is replaced by the process id; default stderr
// A disabled message costs one relaxed load and a compare: the arguments are not evaluated.
#pragma once
#include <atomic>

namespace gpustripe {

enum class LogLevel : int { Error = 0, Warn = 1, Info = 2, Debug = 3, Trace = 4 };
enum class Subsys : int { Api, Config, Topology, Model, Backend, Engine, Ipc, P2p, Coll, Mpi, Bench, Count };

const char* subsys_name(Subsys s);

namespace log_detail {
extern std::atomic<int> g_level;      // -1 until first use, then the parsed level
extern std::atomic<unsigned> g_mask;  // one bit per Subsys
void init_once();
void emit(LogLevel level, Subsys subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
inline bool enabled(LogLevel level, Subsys subsys) {
  int l = g_level.load(std::memory_order_relaxed);
  if (l < 0) {
    init_once();
    l = g_level.load(std::memory_order_relaxed);
  }
  return static_cast<int>(level) <= l && (g_mask.load(std::memory_order_relaxed) >> static_cast<int>(subsys)) & 1u;
}
}  // namespace log_detail

// Re-reads the GPUSTRIPE_LOG_* variables (tests and the CLI change them at run time).
void log_reconfigure();

}  // namespace gpustripe

#define GS_LOG(level, subsys, ...)                                                    \
  do {                                                                                \
    if (::gpustripe::log_detail::enabled((level), (subsys)))                          \
      ::gpustripe::log_detail::emit((level), (subsys), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define GS_LOG_ERROR(subsys, ...) GS_LOG(::gpustripe::LogLevel::Error, subsys, __VA_ARGS__)
#define GS_LOG_WARN(subsys, ...) GS_LOG(::gpustripe::LogLevel::Warn, subsys, __VA_ARGS__)
#define GS_LOG_INFO(subsys, ...) GS_LOG(::gpustripe::LogLevel::Info, subsys, __VA_ARGS__)
#define GS_LOG_DEBUG(subsys, ...) GS_LOG(::gpustripe::LogLevel::Debug, subsys, __VA_ARGS__)
#define GS_LOG_TRACE(subsys, ...) GS_LOG(::gpustripe::LogLevel::Trace, subsys, __VA_ARGS__)
