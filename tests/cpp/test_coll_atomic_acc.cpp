// The atomic accumulates of one-sided MPI (coll/atomic_acc.hpp), on the CPU loop the
// emulated backend runs: every (type, op) against the reduction loops, the kinds that only
// move bits, what is refused, and element-wise atomicity under threads updating the same
// elements (units sharing a 4-byte word included).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "coll/atomic_acc.hpp"
#include "coll/reduce.hpp"
#include "common/error.hpp"
#include "test_util.hpp"

namespace {

using namespace gpustripe;
using namespace gpustripe::coll;

std::vector<unsigned char> random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng() % 7);  // small values: products stay finite
  return v;
}

// Runs `a` (host pointers) where the test wants it: the CPU loop, or the kernel on a GPU.
using Runner = std::function<void(const AtomicAccArgs& a, size_t bytes)>;

// Every (type, op) of units of 1 and 2 values against the reduction loop; the values before
// the update come back as the result.
int check_every_type_and_op(const Runner& run) {
  const DataType types[] = {GPUSTRIPE_FLOAT32, GPUSTRIPE_FLOAT64, GPUSTRIPE_INT8,   GPUSTRIPE_UINT8,
                            GPUSTRIPE_INT16,   GPUSTRIPE_UINT16,  GPUSTRIPE_INT32,  GPUSTRIPE_UINT32,
                            GPUSTRIPE_INT64,   GPUSTRIPE_UINT64,  GPUSTRIPE_FLOAT_INT, GPUSTRIPE_INT_INT,
                            GPUSTRIPE_INT16_INT};
  int checked = 0;
  for (DataType dt : types) {
    for (int o = GPUSTRIPE_SUM; o <= GPUSTRIPE_MAXLOC; ++o) {
      const RedOp op = static_cast<RedOp>(o);
      if (!redop_applies(dt, op)) continue;
      for (size_t per : {size_t(1), size_t(2)}) {
        const size_t es = dtype_size(dt);
        if (per * es > 8) continue;
        const size_t units = 37, bytes = units * per * es;
        std::vector<uint64_t> tgt_store((bytes + 7) / 8), res_store((bytes + 7) / 8), ref_store((bytes + 7) / 8);
        auto* tgt = reinterpret_cast<unsigned char*>(tgt_store.data());
        auto in = random_bytes(bytes, 1 + o), init = random_bytes(bytes, 100 + o);
        std::memcpy(tgt, init.data(), bytes);
        ReduceArgs r;
        r.dst = ref_store.data();
        r.srcs = {in.data(), init.data()};
        r.count = units * per;
        r.dtype = dt;
        r.op = op;
        reduce_host(r);
        AtomicAccArgs a;
        a.target = tgt;
        a.origin = in.data();
        a.result = res_store.data();
        a.units = units;
        a.dtype = dt;
        a.per_unit = per;
        a.op = op;
        EXPECT_TRUE(atomic_acc_supported(a)) << dtype_name(dt) << " " << redop_name(op);
        run(a, bytes);
        if (dt == GPUSTRIPE_INT16_INT) {  // {int16; pad[2]; int32}: the padding is nobody's
          auto* ref = reinterpret_cast<unsigned char*>(ref_store.data());
          for (size_t u = 0; u < units; ++u) ref[8 * u + 2] = tgt[8 * u + 2], ref[8 * u + 3] = tgt[8 * u + 3];
          for (size_t u = 0; u < units; ++u) EXPECT_EQ(tgt[8 * u + 2], init[8 * u + 2]) << "padding kept";
        }
        EXPECT_EQ(std::memcmp(tgt, ref_store.data(), bytes), 0) << dtype_name(dt) << " " << redop_name(op) << " x" << per;
        EXPECT_EQ(std::memcmp(res_store.data(), init.data(), bytes), 0) << "the values before the update";
        ++checked;
      }
    }
  }
  return checked;
}

TEST(AtomicAcc, EveryTypeAndOpMatchesTheReductionLoop) {
  EXPECT_GT(check_every_type_and_op([](const AtomicAccArgs& a, size_t) { atomic_acc_host(a); }), 60);
}

TEST(AtomicAcc, ReplaceFetchAndCompareSwapMoveBits) {
  int32_t t[4] = {1, 2, 3, 4}, in[4] = {9, 9, 9, 9}, cmp[4] = {1, 0, 3, 0}, res[4] = {};
  AtomicAccArgs a;
  a.target = t;
  a.origin = in;
  a.compare = cmp;
  a.result = res;
  a.units = 4;
  a.dtype = GPUSTRIPE_INT32;
  a.kind = AccKind::CompareSwap;
  atomic_acc_host(a);
  EXPECT_EQ(std::vector<int32_t>(t, t + 4), (std::vector<int32_t>{9, 2, 9, 4}));
  EXPECT_EQ(std::vector<int32_t>(res, res + 4), (std::vector<int32_t>{1, 2, 3, 4}));
  a.kind = AccKind::Fetch;
  a.origin = nullptr;
  atomic_acc_host(a);
  EXPECT_EQ(std::vector<int32_t>(res, res + 4), (std::vector<int32_t>{9, 2, 9, 4}));
  EXPECT_EQ(t[1], 2) << "a fetch writes nothing";
  a.kind = AccKind::Replace;
  a.origin = cmp;
  a.result = nullptr;
  atomic_acc_host(a);
  EXPECT_EQ(std::vector<int32_t>(t, t + 4), (std::vector<int32_t>{1, 0, 3, 0}));
}

TEST(AtomicAcc, RefusesWhatItCannotMakeAtomic) {
  alignas(16) unsigned char buf[64] = {};
  AtomicAccArgs a;
  a.target = buf;
  a.origin = buf + 32;
  a.units = 1;
  a.dtype = GPUSTRIPE_DOUBLE_INT;  // 16-byte units
  a.op = GPUSTRIPE_MINLOC;
  EXPECT_FALSE(atomic_acc_supported(a));
  a.dtype = GPUSTRIPE_FLOAT64;
  a.op = GPUSTRIPE_SUM;
  a.per_unit = 2;  // double complex
  EXPECT_FALSE(atomic_acc_supported(a));
  a.per_unit = 1;
  a.target = buf + 4;  // unaligned
  EXPECT_FALSE(atomic_acc_supported(a));
  a.target = buf;
  a.dtype = GPUSTRIPE_FLOAT16;
  EXPECT_FALSE(atomic_acc_supported(a));
  a.dtype = GPUSTRIPE_FLOAT32;
  a.op = GPUSTRIPE_BAND;  // not an op of floats
  EXPECT_FALSE(atomic_acc_supported(a));
  EXPECT_THROW(atomic_acc_host(a), Error);
  a.op = GPUSTRIPE_SUM;
  a.origin = nullptr;
  EXPECT_THROW(atomic_acc_host(a), Error) << "a sum without an origin";
}

// Threads fetch-and-add 1 into the same 1-byte and 8-byte elements: no update is lost, and
// every fetched value is seen exactly once per element (each update read its own old value).
TEST(AtomicAcc, ConcurrentUpdatesOfOneElementLoseNothing) {
  constexpr int kThreads = 4, kRounds = 60;  // 240 < 256: the byte counters do not wrap
  alignas(8) uint8_t bytes[6] = {};          // neighbours in one 4-byte word
  alignas(8) int64_t wide = 0;
  std::vector<std::vector<uint8_t>> seen_b(kThreads);
  std::vector<std::vector<int64_t>> seen_w(kThreads);
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i)
    ts.emplace_back([&, i] {
      const uint8_t one_b[6] = {1, 1, 1, 1, 1, 1};
      const int64_t one_w = 1;
      for (int r = 0; r < kRounds; ++r) {
        uint8_t got[6];
        AtomicAccArgs a;
        a.target = bytes;
        a.origin = one_b;
        a.result = got;
        a.units = 6;
        a.dtype = GPUSTRIPE_UINT8;
        atomic_acc_host(a);
        seen_b[i].push_back(got[3]);
        int64_t gw = 0;
        AtomicAccArgs w;
        w.target = &wide;
        w.origin = &one_w;
        w.result = &gw;
        w.units = 1;
        w.dtype = GPUSTRIPE_INT64;
        atomic_acc_host(w);
        seen_w[i].push_back(gw);
      }
    });
  for (auto& t : ts) t.join();
  for (int k = 0; k < 6; ++k) EXPECT_EQ(bytes[k], kThreads * kRounds) << "byte " << k;
  EXPECT_EQ(wide, kThreads * kRounds);
  std::set<int64_t> all_b, all_w;
  for (int i = 0; i < kThreads; ++i) {
    all_b.insert(seen_b[i].begin(), seen_b[i].end());
    all_w.insert(seen_w[i].begin(), seen_w[i].end());
  }
  EXPECT_EQ(all_b.size(), size_t(kThreads * kRounds));
  EXPECT_EQ(all_w.size(), size_t(kThreads * kRounds));
}

// The kernel on a GPU: the same cases, and two streams fetch-adding into the same counters
// at once (1-byte ones sharing a 4-byte word, and an 8-byte one) lose no update.
TEST(AtomicAccGpu, KernelMatchesTheCpuLoopAndLosesNoUpdate) {
  GS_REQUIRE_GPU(1);
  std::unique_ptr<Backend> b = make_cuda_backend();
  StreamHandle s1 = b->create_stream(0), s2 = b->create_stream(0);
  char* mem = static_cast<char*>(b->alloc_device(0, 4096));
  const int checked = check_every_type_and_op([&](const AtomicAccArgs& host, size_t bytes) {
    AtomicAccArgs d = host;
    d.target = mem;
    d.origin = mem + 1024;
    d.result = mem + 2048;
    b->copy_async(mem, 0, host.target, kHostDevice, bytes, s1);
    b->copy_async(mem + 1024, 0, host.origin, kHostDevice, bytes, s1);
    atomic_acc_async(*b, d, 0, s1);
    b->copy_async(host.target, kHostDevice, mem, 0, bytes, s1);
    b->copy_async(host.result, kHostDevice, mem + 2048, 0, bytes, s1);
    b->synchronize_stream(s1);
  });
  EXPECT_GT(checked, 60);

  constexpr int kRounds = 100;  // per stream: 200 < 256, the byte counters do not wrap
  const uint8_t ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  const int64_t one = 1;
  b->memset_async(mem, 0, 0, 4096, s1);
  b->copy_async(mem + 16, 0, ones, kHostDevice, sizeof ones, s1);
  b->copy_async(mem + 24, 0, &one, kHostDevice, sizeof one, s1);
  b->synchronize_stream(s1);
  for (int r = 0; r < kRounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      AtomicAccArgs a;
      a.target = mem;  // 6 counters of 1 byte
      a.origin = mem + 16;
      a.result = mem + 64 + (2 * r + k) * 8;
      a.units = 6;
      a.dtype = GPUSTRIPE_UINT8;
      atomic_acc_async(*b, a, 0, k ? s2 : s1);
      AtomicAccArgs w;
      w.target = mem + 8;  // one counter of 8 bytes
      w.origin = mem + 24;
      w.result = mem + 2048 + (2 * r + k) * 8;
      w.units = 1;
      w.dtype = GPUSTRIPE_INT64;
      atomic_acc_async(*b, w, 0, k ? s2 : s1);
    }
  }
  b->synchronize_stream(s1);
  b->synchronize_stream(s2);
  uint8_t counters[16];
  std::vector<uint8_t> fetched_b(2 * kRounds * 8);
  std::vector<int64_t> fetched_w(2 * kRounds);
  b->copy_async(counters, kHostDevice, mem, 0, sizeof counters, s1);
  b->copy_async(fetched_b.data(), kHostDevice, mem + 64, 0, fetched_b.size(), s1);
  b->copy_async(fetched_w.data(), kHostDevice, mem + 2048, 0, fetched_w.size() * 8, s1);
  b->synchronize_stream(s1);
  for (int k = 0; k < 6; ++k) EXPECT_EQ(counters[k], 2 * kRounds) << "byte " << k;
  int64_t wide;
  std::memcpy(&wide, counters + 8, 8);
  EXPECT_EQ(wide, 2 * kRounds);
  std::set<int> seen_b;
  for (int i = 0; i < 2 * kRounds; ++i) seen_b.insert(fetched_b[i * 8 + 3]);
  EXPECT_EQ(seen_b.size(), size_t(2 * kRounds));
  EXPECT_EQ(std::set<int64_t>(fetched_w.begin(), fetched_w.end()).size(), size_t(2 * kRounds));
  b->free_device(mem);
  b->destroy_stream(s1);
  b->destroy_stream(s2);
}

}  // namespace
