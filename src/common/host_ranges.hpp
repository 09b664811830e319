// Host memory a pointer query need not be asked about: the process's brk heap and the calling
// thread's stack. Neither can ever hold device memory (the driver maps device and managed memory
// in ranges of its own), so an MPI call on a scalar or a small buffer there skips the driver's
// pointer query (a microsecond-scale call on every message's latency path). Memory registered
// with cudaHostRegister there is still host memory, as the p2p layer treats it.
#pragma once

namespace gpustripe {

// True when `p` lies in the brk heap (as it is now) or in the calling thread's stack. False
// says nothing: the memory may be host memory elsewhere (mmap, other threads' stacks).
bool in_heap_or_own_stack(const void* p);

}  // namespace gpustripe
