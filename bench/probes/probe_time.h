// What the probes of small copies share beyond probe_check.h: a host clock in microseconds, the
// median of a sample, and a check of driver-API calls (stops the probe, naming the call).
#pragma once
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

inline double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline void CU(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* s = nullptr;
    cuGetErrorString(r, &s);
    fprintf(stderr, "CUDA driver %s: %s\n", what, s ? s : "?");
    exit(1);
  }
}
