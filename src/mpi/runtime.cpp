#include "mpi/runtime.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe::mpi {
namespace {

const BoolSetting kEnable{"GPUSTRIPE_MPI", "yes",
                          "The PMPI interposer (libgpustripe_mpi.so) routes transfers; no: every call goes to the MPI "
                          "unchanged"};
const ChoiceSetting kCudaAware{"GPUSTRIPE_MPI_CUDA_AWARE", "auto",
                               "Whether the MPI reads device memory itself (then device buffers to other nodes pass "
                               "through); auto asks MPIX_Query_cuda_support",
                               {"auto", "yes", "no"}};

Runtime* g_runtime = nullptr;
constexpr uint64_t kCtxWorld = 1, kCtxSelf = 2;

bool mpi_is_cuda_aware() {
  std::string v = kCudaAware.get();
  if (v != "auto") return v == "yes";
  using Query = int (*)();
  auto q = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "MPIX_Query_cuda_support"));
  return q && q() == 1;
}

}  // namespace

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  PMPI_Error_string(rc, msg, &len);
  GS_THROW(GPUSTRIPE_ERR_MPI, "%s: %s", what, msg);
}

Runtime* Runtime::get() { return g_runtime; }

void Runtime::start() {
  if (g_runtime || !kEnable.get()) return;
  g_runtime = new Runtime();
}

void Runtime::stop() {
  delete g_runtime;
  g_runtime = nullptr;
}

Runtime::Runtime() {
  check_mpi(PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank_), "MPI_Comm_rank");
  check_mpi(PMPI_Comm_size(MPI_COMM_WORLD, &world_size_), "MPI_Comm_size");
  const int64_t fake = parse_int(test_hook("fake_nodes", "0"), "GPUSTRIPE_TEST fake_nodes");
  GS_REQUIRE(fake >= 0 && fake <= world_size_, GPUSTRIPE_ERR_CONFIG,
             "GPUSTRIPE_TEST fake_nodes=%lld: between 0 and the %d ranks", static_cast<long long>(fake), world_size_);
  if (fake > 0) {
    int color = static_cast<int>(static_cast<int64_t>(world_rank_) * fake / world_size_);
    check_mpi(PMPI_Comm_split(MPI_COMM_WORLD, color, world_rank_, &node_comm_), "MPI_Comm_split (fake nodes)");
  } else {
    check_mpi(PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node_comm_),
              "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  }
  int local = 0, nlocal = 0;
  PMPI_Comm_rank(node_comm_, &local);
  PMPI_Comm_size(node_comm_, &nlocal);
  // A node is named by the world rank of its first process.
  int node = world_rank_;
  PMPI_Bcast(&node, 1, MPI_INT, 0, node_comm_);
  node_of_.resize(world_size_);
  local_of_.resize(world_size_);
  world_of_local_.resize(nlocal);
  check_mpi(PMPI_Allgather(&node, 1, MPI_INT, node_of_.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  check_mpi(PMPI_Allgather(&local, 1, MPI_INT, local_of_.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  check_mpi(PMPI_Allgather(&world_rank_, 1, MPI_INT, world_of_local_.data(), 1, MPI_INT, node_comm_),
            "MPI_Allgather");

  ctx_ = std::make_unique<Context>();
  emulated_ = ctx_->backend().emulated();
  cuda_aware_ = mpi_is_cuda_aware();

  ch_ = ipc::join_channel(
      local, nlocal, [this](char* name) { check_mpi(PMPI_Bcast(name, 128, MPI_CHAR, 0, node_comm_), "MPI_Bcast"); },
      [this] { check_mpi(PMPI_Barrier(node_comm_), "MPI_Barrier"); });

  ep_ = std::make_unique<p2p::Endpoint>(*ch_, &ctx_->backend(), p2p::engine_copy(ctx_->engine(), ch_.get()),
                                         p2p::engine_plain(ctx_->engine()));
  add_comm(MPI_COMM_WORLD, kCtxWorld);
  add_comm(MPI_COMM_SELF, kCtxSelf);
  GS_LOG_INFO(Subsys::Mpi, "rank %d: node %d (local rank %d of %d), %s backend, MPI %sCUDA-aware", world_rank_, node,
              local, nlocal, ctx_->backend_name(), cuda_aware_ ? "" : "not ");
}

Runtime::~Runtime() {
  coll_state.reset();
  try {
    ep_->flush();
  } catch (const Error& e) {
    GS_LOG_WARN(Subsys::Mpi, "rank %d: finalize: %s", world_rank_, e.what());
  }
  // Nobody leaves while a node peer may still read what this rank sent.
  PMPI_Barrier(node_comm_);
  ep_.reset();
  ch_.reset();
  for (auto& kv : staging_free_) ctx_->backend().free_pinned(kv.second);
  ctx_.reset();
  PMPI_Comm_free(&node_comm_);
}

void Runtime::add_comm(MPI_Comm c, uint64_t ctx) {
  CommInfo info;
  info.ctx = ctx;
  int size = 0;
  PMPI_Comm_size(c, &size);
  MPI_Group g, world;
  PMPI_Comm_group(c, &g);
  PMPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> ranks(size);
  for (int i = 0; i < size; ++i) ranks[i] = i;
  info.world_of.resize(size);
  PMPI_Group_translate_ranks(g, size, ranks.data(), world, info.world_of.data());
  PMPI_Group_free(&g);
  PMPI_Group_free(&world);
  for (int i = 0; i < size; ++i) {
    info.rank_of[info.world_of[i]] = i;
    if (!same_node(info.world_of[i])) info.has_remote = true;
  }
  comms_[c] = std::make_shared<const CommInfo>(std::move(info));
}

std::shared_ptr<const CommInfo> Runtime::comm(MPI_Comm c) {
  auto it = comms_.find(c);
  return it == comms_.end() ? nullptr : it->second;
}

void Runtime::register_comm(MPI_Comm parent, MPI_Comm made) {
  // Ids only grow on every process, so two communicators sharing a pair of ranks never
  // share an id; the max over the parent makes the new one equal on all members.
  uint64_t agreed = 0;
  check_mpi(PMPI_Allreduce(&next_ctx_, &agreed, 1, MPI_UINT64_T, MPI_MAX, parent), "MPI_Allreduce (communicator id)");
  next_ctx_ = agreed + 1;
  if (made == MPI_COMM_NULL) return;
  int inter = 0;
  PMPI_Comm_test_inter(made, &inter);
  if (inter) return;  // intercommunicators stay with the MPI
  add_comm(made, agreed);
}

void Runtime::forget_comm(MPI_Comm c) { comms_.erase(c); }

Runtime::Pinned Runtime::staging_alloc(size_t bytes) {
  bytes = std::max<size_t>(bytes, 64);
  auto it = staging_free_.lower_bound(bytes);
  if (it != staging_free_.end() && it->first <= 2 * bytes) {
    Pinned b{static_cast<char*>(it->second), it->first};
    staging_free_.erase(it);
    return b;
  }
  return Pinned{static_cast<char*>(ctx_->backend().alloc_pinned(bytes)), bytes};
}

void Runtime::staging_free(Pinned b) {
  if (b.p) staging_free_.emplace(b.bytes, b.p);
}

}  // namespace gpustripe::mpi
