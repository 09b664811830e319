// Host memory as the eager slots have it (src/p2p/eager_slots.cpp), for the probes of small
// copies: a POSIX shared-memory area, mapped and registered for the current GPU (Portable |
// Mapped). The name is removed at once; the area lives until the probe exits.
#pragma once
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "probe_check.h"

// `bytes` of zeroed registered shared memory; *mapped: its address for kernels.
inline char* registered_shm(const char* tag, size_t bytes, char** mapped) {
  const std::string name = std::string("/") + tag + "-" + std::to_string(getpid());
  int fd = shm_open(name.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    perror("shm");
    exit(1);
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  shm_unlink(name.c_str());
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  memset(p, 0, bytes);
  CK(cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped));
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(mapped), p, 0));
  return static_cast<char*>(p);
}
