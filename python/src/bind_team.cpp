// gpustripe._core.NodeTeam: the cross-process collective team (src/mpi/node_team.hpp)
// for processes that meet through a key-value store instead of MPI (the PyTorch backend,
// gpustripe/torch.py). Buffers are raw device pointers (ints); a call returns False on
// every member, having done nothing, when some member's side cannot take it. `stream`: the
// caller's cudaStream_t (int): the call is ordered after it, its results are there for work
// enqueued on calls_stream(device) afterwards (node_team.hpp); 0: it returns when done.
// `queued`: the call (with a stream) is handed to the team's worker, which meets the other
// members and enqueues it in call order; it returns True at once or raises (node_team.hpp).
// `joined`: the call (with a stream, not queued) runs on the caller's stream itself, whose later
// work sees its results (a blocking call's end, no join() needed). `staged` (allreduce,
// reduce_scatter, allgather, alltoall): False, a call small enough for the slots (stage_limit()) meets the
// other members instead; the same on every member.
#include <nanobind/stl/function.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "bindings.hpp"
#include "coll/types.hpp"
#include "common/error.hpp"
#include "ipc/wait.hpp"
#include "mpi/node_team.hpp"

namespace gpustripe::py {
namespace {

using mpi::CollTeam;
using mpi::NodeTeam;

void* as_ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }

// The members meet through `allgather(bytes, timeout) -> bytes`: every member's message,
// concatenated in rank order, waiting at most `timeout` seconds (GPUSTRIPE_TIMEOUT; 0: no
// limit). It may be called from a call that released the GIL.
std::unique_ptr<ipc::Bootstrap> bootstrap_of(int rank, int size, nb::callable allgather) {
  auto fn = [allgather, size](const void* mine, size_t bytes, void* all) {
    nb::gil_scoped_acquire gil;
    nb::object got = allgather(nb::bytes(static_cast<const char*>(mine), bytes), ipc::timeout_seconds());
    nb::bytes b = nb::cast<nb::bytes>(got);
    GS_REQUIRE(b.size() == bytes * static_cast<size_t>(size), GPUSTRIPE_ERR_INVALID_ARGUMENT,
               "bootstrap allgather returned %zu bytes for %d members of %zu bytes", b.size(), size, bytes);
    std::memcpy(all, b.c_str(), b.size());
  };
  return std::make_unique<ipc::FunctionBootstrap>(rank, size, fn);
}

void bind_team(nb::module_& m) {
  nb::class_<NodeTeam>(m, "NodeTeam",
                       "Collectives across the processes of this node (one GPU each), which meet through "
                       "allgather(bytes, timeout) -> bytes (every member's message in rank order, waiting at most "
                       "timeout seconds: GPUSTRIPE_TIMEOUT, 0 for no limit)")
      .def("__init__",
           [](NodeTeam* t, int rank, int size, nb::callable allgather) {
             new (t) NodeTeam(bootstrap_of(rank, size, std::move(allgather)));
           },
           nb::arg("rank"), nb::arg("size"), nb::arg("allgather"))
      .def_prop_ro("rank", &NodeTeam::rank)
      .def_prop_ro("size", &NodeTeam::size)
      .def_prop_ro("context", &NodeTeam::context, nb::rv_policy::reference_internal,
                   "The team's gpustripe.Context (its devices; alloc_device/upload/download in tests)")
      .def(
          "mapping_stats",
          [](const NodeTeam& t) {
            ipc::HandleCacheStats st = without_gil([&] { return t.mapping_stats(); });  // the worker may hold the team
            nb::dict d;
            d["hits"] = st.hits;
            d["misses"] = st.misses;
            d["stale_evictions"] = st.stale_evictions;
            d["capacity_evictions"] = st.capacity_evictions;
            return d;
          },
          "Mappings of other members' buffers: misses (mapped anew), hits (reused), evictions")
      .def("settle", [](NodeTeam& t) { without_gil([&] { t.settle(); }); },
           "Returns once every stream-ordered call made so far is done on this member's GPUs")
      .def(
          "calls_stream",
          [](NodeTeam& t, int dev) { return reinterpret_cast<uintptr_t>(without_gil([&] { return t.calls_stream(dev); })); },
          nb::arg("device"),
          "The stream (int) that stream-ordered calls on `device` end on: work enqueued on it after a call sees "
          "its results. Waits first until the worker has enqueued every queued call (as join()): ask for it before "
          "each use")
      .def(
          "join", [](NodeTeam& t, int dev, uintptr_t stream) { without_gil([&] { t.join(dev, as_ptr(stream)); }); },
          nb::arg("device"), nb::arg("stream"),
          "Work enqueued on `stream` (int, of `device`) from now on sees the results of every call made so far, "
          "with no wait for the GPUs: a blocking call's end on the caller's stream. Waits first until the worker "
          "has enqueued every queued call (bounded by GPUSTRIPE_TIMEOUT), raising the error of one that failed")
      .def(
          "queue_stats",
          [](const NodeTeam& t) {
            nb::dict d;
            d["queued"] = t.queued();
            d["done"] = t.queue_done();
            d["can_queue"] = t.can_queue();
            d["events_created"] = t.ready_events_created();
            return d;
          },
          "Calls queued to the team's worker (queued=True), those it has run, whether calls can be queued "
          "here (the backend has stream flags), and the events made for the queued calls' starts (reused)")
      .def("queue_posted", &NodeTeam::queue_posted,
           "The number of the latest job handed to the team's worker (ask right after a queued call: its number)")
      .def("queue_latency_us", &NodeTeam::queue_latency_us, nb::arg("job"),
           "How long job `job` (queue_posted()) took from its hand-over to the team's worker to the end of its run "
           "(for a queued call: the wait behind earlier jobs, the other ranks' hosts met, the call enqueued), in "
           "microseconds; negative where it has not run yet")
      .def("stage_limit", &NodeTeam::stage_limit,
           "The most bytes a call's part for one member may have to be staged through the slots mapped once (an "
           "allreduce's input, a reduce-scatter's or allgather's block); 0 where no call is staged. staged=False on "
           "such a call makes it meet the other members instead")
      .def("ordered_calls", &NodeTeam::ordered_calls,
           "Stream-ordered calls made so far, queued or not (ask right after a call: its number)")
      .def("enqueued_behind", &NodeTeam::enqueued_behind, nb::arg("call"),
           "Whether stream-ordered call `call` (ordered_calls()) was enqueued while the team's call before it still "
           "ran on some member's GPU, so that the host's time before it kept no GPU waiting: 1, else 0; -1 where it "
           "has not been enqueued yet or is too old to be kept")
      .def(
          "wait_queued",
          [](NodeTeam& t, uint64_t job, int dev) {
            return reinterpret_cast<uintptr_t>(without_gil([&] { return t.wait_queued(job, dev); }));
          },
          nb::arg("job"), nb::arg("device"),
          "Returns once the team's worker has run its jobs up to number `job` (queue_posted()), not the later "
          "ones, and returns calls_stream(device) (int), where that call's end may be enqueued now. Raises the "
          "error of one that failed; bounded by GPUSTRIPE_TIMEOUT. Callable from another thread than the "
          "caller's (no GIL held while waiting)")
      .def("mark", [](NodeTeam& t, int dev) { return without_gil([&] { return t.mark(dev); }); }, nb::arg("device"),
           "Marks the end of the calls made so far on `device` (on calls_stream(device)), for a caller that holds "
           "each call's buffers until the GPUs are past it; returns how many of the earlier marks, oldest first, "
           "are now passed (the caller lets go of its oldest calls' buffers; this mark is not among them). Events "
           "are reused once passed. With calls queued, the team's worker makes the mark after them")
      .def("marks_passed", [](NodeTeam& t) { return without_gil([&] { return t.marks_passed(); }); },
           "How many more of the oldest marks (mark()) are passed now, counted as mark() counts them")
      .def(
          "marks_stats",
          [](const NodeTeam& t) {
            nb::dict d;
            const mpi::CallMarks::Stats st = t.marks_stats();
            d["in_flight"] = st.in_flight;
            d["events_created"] = st.events_created;
            return d;
          },
          "mark()'s marks not yet seen passed, and the events created for them so far")
      .def(
          "phase_times",
          [](NodeTeam& t, bool reset) {
            CollTeam::PhaseTimes p = without_gil([&] { return t.phase_times(reset); });  // as mapping_stats
            nb::dict d;
            d["calls"] = p.calls;
            d["ordered"] = p.ordered;
            d["built"] = p.built;
            d["staged"] = p.staged;
            d["lookup"] = p.lookup;
            d["prepare"] = p.prepare;
            d["exchange"] = p.exchange;
            d["map"] = p.map;
            d["enqueue"] = p.enqueue;
            d["drain"] = p.drain;
            d["barrier"] = p.barrier;
            return d;
          },
          nb::arg("reset") = false,
          "Host time per call by phase, us (means over the calls with a known program since the last reset): "
          "lookup (the buffers' devices, the call's description; calls not queued only), prepare, exchange (handles; the entry barrier), map (+program), enqueue, drain (waiting for the GPUs), "
          "barrier (the hosts' barriers: a stream-ordered call the hosts order after all); calls, and of them "
          "ordered (enqueued stream-ordered), staged (through the team's staging slots: no exchange) and built (their "
          "Program built anew, not found in the team's cache)")
      .def(
          "stream", [](NodeTeam& t, int dev) { return reinterpret_cast<uintptr_t>(t.stream(dev)); },
          nb::arg("device"),
          "A stream of the team's own on `device` (int), to order calls on where no framework's stream is at hand")
      .def(
          "allreduce",
          [](NodeTeam& t, uintptr_t send, uintptr_t recv, size_t count, const std::string& dtype,
             const std::string& op, uintptr_t stream, bool queued, bool joined, bool staged) {
            coll::DataType dt = coll::parse_dtype(dtype);
            coll::RedOp o = coll::parse_redop(op);
            return without_gil(
                [&] { return t.allreduce(as_ptr(send), as_ptr(recv), count, dt, o, as_ptr(stream), queued, joined, staged); });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("count"), nb::arg("dtype"), nb::arg("op") = "sum",
          nb::arg("stream") = 0, nb::arg("queued") = false, nb::arg("joined") = false, nb::arg("staged") = true)
      .def(
          "reduce_scatter",
          [](NodeTeam& t, uintptr_t send, uintptr_t recv, size_t count, const std::string& dtype,
             const std::string& op, uintptr_t stream, bool queued, bool joined, bool staged) {
            coll::DataType dt = coll::parse_dtype(dtype);
            coll::RedOp o = coll::parse_redop(op);
            return without_gil(
                [&] { return t.reduce_scatter(as_ptr(send), as_ptr(recv), count, dt, o, as_ptr(stream), queued, joined, staged); });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("count"), nb::arg("dtype"), nb::arg("op") = "sum",
          nb::arg("stream") = 0, nb::arg("queued") = false, nb::arg("joined") = false, nb::arg("staged") = true,
          "count: elements of each member's block (recv)")
      .def(
          "allgather",
          [](NodeTeam& t, uintptr_t send, uintptr_t recv, size_t block, uintptr_t stream, bool queued, bool joined,
             bool staged) {
            return without_gil(
                [&] { return t.allgather(as_ptr(send), as_ptr(recv), block, as_ptr(stream), queued, joined, staged); });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("block_bytes"), nb::arg("stream") = 0, nb::arg("queued") = false,
          nb::arg("joined") = false, nb::arg("staged") = true)
      .def(
          "alltoall",
          [](NodeTeam& t, uintptr_t send, uintptr_t recv, size_t block, uintptr_t stream, bool queued, bool joined,
             bool staged) {
            return without_gil(
                [&] { return t.alltoall(as_ptr(send), as_ptr(recv), block, as_ptr(stream), queued, joined, staged); });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("block_bytes"), nb::arg("stream") = 0, nb::arg("queued") = false,
          nb::arg("joined") = false, nb::arg("staged") = true)
      .def(
          "alltoallv",
          [](NodeTeam& t, uintptr_t send, uintptr_t recv, const std::vector<size_t>& send_at,
             const std::vector<size_t>& send_len, const std::vector<size_t>& recv_at,
             const std::vector<size_t>& recv_len, uintptr_t stream, bool queued, bool joined, int device) {
            return without_gil([&] {
              return t.alltoallv(as_ptr(send), as_ptr(recv), send_at, send_len, recv_at, recv_len, as_ptr(stream),
                                 queued, joined, device);
            });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("send_at"), nb::arg("send_bytes"), nb::arg("recv_at"),
          nb::arg("recv_bytes"), nb::arg("stream") = 0, nb::arg("queued") = false, nb::arg("joined") = false,
          nb::arg("device") = -1,
          "Uneven blocks, byte offsets and sizes per member: send_bytes[j] at send + send_at[j] to member j, member "
          "i's recv_bytes[i] into recv + recv_at[i] (node_team.hpp); `device`: this member's GPU where it neither "
          "sends nor receives. False on every member where a sender's and its receiver's sizes differ.")
      .def(
          "bcast",
          [](NodeTeam& t, uintptr_t buf, size_t bytes, int root, uintptr_t stream, bool queued, bool joined) {
            return without_gil([&] { return t.bcast(as_ptr(buf), bytes, root, as_ptr(stream), queued, joined); });
          },
          nb::arg("buf"), nb::arg("bytes"), nb::arg("root"), nb::arg("stream") = 0, nb::arg("queued") = false, nb::arg("joined") = false)
      .def(
          "reduce",
          [](NodeTeam& t, uintptr_t send, uintptr_t recv, size_t count, const std::string& dtype,
             const std::string& op, int root, uintptr_t stream, bool queued, bool joined) {
            coll::DataType dt = coll::parse_dtype(dtype);
            coll::RedOp o = coll::parse_redop(op);
            return without_gil(
                [&] { return t.reduce(as_ptr(send), as_ptr(recv), count, dt, o, root, as_ptr(stream), queued, joined); });
          },
          nb::arg("send"), nb::arg("recv"), nb::arg("count"), nb::arg("dtype"), nb::arg("op"), nb::arg("root"),
          nb::arg("stream") = 0, nb::arg("queued") = false, nb::arg("joined") = false);
}

BindingRegistrar reg(55, bind_team);

}  // namespace
}  // namespace gpustripe::py
