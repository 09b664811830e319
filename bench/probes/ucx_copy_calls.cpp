// Probe (issue 14): where the CUDA-aware MPI's (Open MPI + UCX) rendezvous message spends its
// time in the CUDA driver, to set beside the p2p layer's own phase trace (GPUSTRIPE_P2P_TRACE).
// Loaded into the CUDA-aware MPI's ranks (LD_PRELOAD), it times the driver calls UCX's cuda
// transports make through their own imports of libcuda: per pulled copy (cuMemcpyDtoDAsync, as
// cuda_ipc issues its gets), the copy call, the event record after it, and from the record's
// return to the first cuEventQuery that finds that event complete (and how many queries asked);
// the pointer-attribute queries made between two copies (memory type detection, handle lookups)
// and their time; the time from one copy to the next in the same process. The CUDA runtime
// resolves its driver calls through cuGetProcAddress and is not seen: only UCX's calls are.
// At exit each process writes, to stderr, one JSON line per copy size with the medians.
// Build: g++ -O2 -shared -fPIC -o libucx_copy_calls.so ucx_copy_calls.cpp -ldl
// Run:   mpirun ... -x LD_PRELOAD=$PWD/libucx_copy_calls.so <the CUDA-aware MPI's benchmark>
#include <dlfcn.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <vector>

namespace {

using CUresult = int;
using CUdeviceptr = unsigned long long;
using CUstream = void*;
using CUevent = void*;

double now_us() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

// libcuda as UCX's cuda module loads it (dlopen'ed, not in the global scope: RTLD_NEXT misses it).
template <class F>
F real(const char* name) {
  static void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  void* p = cuda ? dlsym(cuda, name) : nullptr;
  if (!p) {
    fprintf(stderr, "ucx_copy_calls: no %s in libcuda.so.1\n", name);
    _exit(1);
  }
  return reinterpret_cast<F>(p);
}

struct Copy {
  size_t bytes;
  double call_us, record_us, seen_us, since_last_us, attr_us;
  int queries, attrs;
};

std::vector<Copy>* g_copies;
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
// The copy whose completion is awaited: its event, stamps, queries so far.
CUevent g_event = nullptr;
Copy g_open{};
double g_record_ret = 0, g_last_call = 0;
bool g_open_valid = false, g_after_copy = false;
int g_attrs = 0;
double g_attr_us = 0;

double med(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A pointer query, counted and timed toward the next copy.
template <class Call>
CUresult timed_query(Call call) {
  const double t0 = now_us();
  CUresult r = call();
  const double t1 = now_us();
  pthread_mutex_lock(&g_mu);
  ++g_attrs;
  g_attr_us += t1 - t0;
  pthread_mutex_unlock(&g_mu);
  return r;
}

__attribute__((destructor)) void report() {
  if (!g_copies || g_copies->empty()) return;
  std::map<size_t, std::vector<const Copy*>> by;
  for (const Copy& c : *g_copies)
    if (c.seen_us > 0) by[c.bytes].push_back(&c);
  for (auto& [bytes, v] : by) {
    std::vector<double> call, rec, seen, gap, q, attrs, attr_us;
    for (const Copy* c : v) {
      call.push_back(c->call_us);
      rec.push_back(c->record_us);
      seen.push_back(c->seen_us);
      if (c->since_last_us > 0) gap.push_back(c->since_last_us);
      q.push_back(c->queries);
      attrs.push_back(c->attrs);
      attr_us.push_back(c->attr_us);
    }
    fprintf(stderr,
            "UCX_COPY {\"pid\": %d, \"bytes\": %zu, \"n\": %zu, \"copy_call_us\": %.2f, \"record_us\": %.2f, "
            "\"seen_after_record_us\": %.2f, \"queries\": %.0f, \"pointer_queries\": %.0f, \"pointer_query_us\": %.2f, "
            "\"copy_to_copy_us\": %.2f}\n",
            getpid(), bytes, v.size(), med(call), med(rec), med(seen), med(q), med(attrs), med(attr_us), med(gap));
  }
}

}  // namespace

extern "C" {

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  static auto f = real<CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream)>("cuMemcpyDtoDAsync_v2");
  const double t0 = now_us();
  CUresult r = f(dst, src, n, s);
  const double t1 = now_us();
  pthread_mutex_lock(&g_mu);
  g_open = Copy{n, t1 - t0, 0, 0, g_last_call > 0 ? t0 - g_last_call : 0, g_attr_us, 0, g_attrs};
  g_last_call = t0;
  g_attrs = 0;
  g_attr_us = 0;
  g_open_valid = false;
  g_after_copy = true;
  pthread_mutex_unlock(&g_mu);
  return r;
}

CUresult cuEventRecord(CUevent e, CUstream s) {
  static auto f = real<CUresult (*)(CUevent, CUstream)>("cuEventRecord");
  const double t0 = now_us();
  CUresult r = f(e, s);
  const double t1 = now_us();
  pthread_mutex_lock(&g_mu);
  if (g_after_copy) {  // the event that marks the copy just issued
    g_after_copy = false;
    g_open.record_us = t1 - t0;
    g_record_ret = t1;
    g_event = e;
    g_open_valid = true;
  }
  pthread_mutex_unlock(&g_mu);
  return r;
}

CUresult cuEventQuery(CUevent e) {
  static auto f = real<CUresult (*)(CUevent)>("cuEventQuery");
  CUresult r = f(e);
  const double t = now_us();
  pthread_mutex_lock(&g_mu);
  if (g_open_valid && e == g_event) {
    ++g_open.queries;
    if (r == 0) {
      g_open.seen_us = t - g_record_ret;
      if (!g_copies) g_copies = new std::vector<Copy>();
      g_copies->push_back(g_open);
      g_open_valid = false;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return r;
}

CUresult cuPointerGetAttributes(unsigned n, void* attrs, void** data, CUdeviceptr p) {
  static auto f = real<CUresult (*)(unsigned, void*, void**, CUdeviceptr)>("cuPointerGetAttributes");
  return timed_query([&] { return f(n, attrs, data, p); });
}

CUresult cuPointerGetAttribute(void* data, int attr, CUdeviceptr p) {
  static auto f = real<CUresult (*)(void*, int, CUdeviceptr)>("cuPointerGetAttribute");
  return timed_query([&] { return f(data, attr, p); });
}

}  // extern "C"
