#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdlib>
#include <memory>
#include <thread>

#include "common/host_ranges.hpp"

namespace gpustripe {
namespace {

// Stack and brk-heap memory are known host memory; an mmap'd region (where the driver keeps
// device and managed memory) is not, and neither is another thread's stack.
TEST(HostRanges, HeapAndOwnStackOnly) {
  char here = 0;
  EXPECT_TRUE(in_heap_or_own_stack(&here));
  // Small allocations of the main thread come from the brk heap.
  std::unique_ptr<char[]> small(new char[64]);
  EXPECT_TRUE(in_heap_or_own_stack(small.get()));
  void* mapped = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  EXPECT_FALSE(in_heap_or_own_stack(mapped));
  EXPECT_FALSE(in_heap_or_own_stack(static_cast<char*>(mapped) + (1 << 19)));
  munmap(mapped, 1 << 20);
  EXPECT_FALSE(in_heap_or_own_stack(nullptr));
  bool theirs_mine = true, own_there = false;
  std::thread t([&] {
    char there = 0;
    own_there = in_heap_or_own_stack(&there);
    theirs_mine = in_heap_or_own_stack(&here);  // the main thread's stack, from another thread
  });
  t.join();
  EXPECT_TRUE(own_there);
  EXPECT_FALSE(theirs_mine);
}

}  // namespace
}  // namespace gpustripe
