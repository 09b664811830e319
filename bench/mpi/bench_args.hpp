// Command-line helpers shared by the MPI benchmark clients (plain C++, nothing of gpustripe).
#pragma once
#include <cstddef>
#include <cstdlib>

// "64K", "1M", "1G", "8": bytes (powers of 1024).
inline size_t parse_bytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024.0 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(v);
}
