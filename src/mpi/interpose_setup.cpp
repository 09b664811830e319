// Interposed setup calls: Init/Init_thread/Finalize start and stop the runtime;
// the communicator calls tell it the communicators' members and agree on their
// p2p ids; Get_count reads the statuses the interposer fills.
#include <cstdio>

#include "common/error.hpp"
#include "mpi/interpose.hpp"

using namespace gpustripe;
using namespace gpustripe::mpi;

namespace {

void start_or_abort() {
  try {
    Runtime::start();
  } catch (const std::exception& e) {
    // Without the runtime a device buffer would crash the non-CUDA-aware MPI later,
    // far from the cause: stop here with the reason.
    std::fprintf(stderr, "gpustripe_mpi: cannot start (set GPUSTRIPE_MPI=no to run without it): %s\n", e.what());
    std::fflush(stderr);
    PMPI_Abort(MPI_COMM_WORLD, 1);
  }
}

int after_comm_made(int rc, MPI_Comm parent, MPI_Comm* made, const char* call) {
  if (rc != MPI_SUCCESS || !Runtime::get()) return rc;
  try {
    std::lock_guard<std::recursive_mutex> l(lock());
    Runtime::get()->register_comm(parent, *made);
    return rc;
  } catch (const std::exception& e) {
    return report(parent, call, e);
  }
}

// A communicator going away takes its collective team with it (shared segment, scratch,
// streams): a program making and freeing communicators keeps its resources flat.
void forget(MPI_Comm* comm) {
  std::lock_guard<std::recursive_mutex> l(lock());
  Runtime* rt = Runtime::get();
  if (!rt || !comm) return;
  if (std::shared_ptr<const CommInfo> ci = rt->comm(*comm)) release_collective_team(*rt, ci->ctx);
  rt->forget_comm(*comm);
}

}  // namespace

extern "C" {

int MPI_Init(int* argc, char*** argv) {
  int rc = PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) start_or_abort();
  return rc;
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) start_or_abort();
  return rc;
}

int MPI_Finalize(void) {
  try {
    wait_buffered_sends("MPI_Finalize");  // the MPI waits for its own before it ends; takes lock() per pass
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpustripe_mpi: finalize: %s\n", e.what());
  }
  {
    std::lock_guard<std::recursive_mutex> l(lock());
    try {
      progress_detached();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpustripe_mpi: finalize: %s\n", e.what());
    }
    Runtime::stop();
  }
  return PMPI_Finalize();
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm) {
  return after_comm_made(PMPI_Comm_dup(comm, newcomm), comm, newcomm, "MPI_Comm_dup");
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
  return after_comm_made(PMPI_Comm_split(comm, color, key, newcomm), comm, newcomm, "MPI_Comm_split");
}

int MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info, MPI_Comm* newcomm) {
  return after_comm_made(PMPI_Comm_split_type(comm, type, key, info, newcomm), comm, newcomm, "MPI_Comm_split_type");
}

int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm* newcomm) {
  return after_comm_made(PMPI_Comm_create(comm, group, newcomm), comm, newcomm, "MPI_Comm_create");
}

int MPI_Comm_free(MPI_Comm* comm) {
  forget(comm);
  return PMPI_Comm_free(comm);
}

int MPI_Comm_disconnect(MPI_Comm* comm) {
  forget(comm);
  return PMPI_Comm_disconnect(comm);
}

int MPI_Get_count(const MPI_Status* status, MPI_Datatype type, int* count) {
  // The interposer's statuses carry their byte count the MPI's way
  // (MPI_Status_set_elements_x), so the MPI computes the count.
  return PMPI_Get_count(status, type, count);
}

}  // extern "C"
