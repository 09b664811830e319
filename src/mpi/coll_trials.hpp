// Which of a few schedules a team's calls of one kind and size class take, chosen by timing the
// calls themselves (no extra calls): the choice between forms whose order no constant can say
// on every node (coll::measured_candidates: a host-paced pair's broadcast by the copy kernel or
// by the root's copy engine).
//
// The first calls of a size class (sizes within a power of two) take the forms in turn, each
// form's first call a warm-up (its Program built, its buffers mapped), not timed. Each rank
// times its own trial calls (entry to end, host clock) and posts its latest time in the next
// call's entry exchange; every rank records, for each call, the slowest rank's time, once every
// rank posted that same call's. So the record, and every decision drawn from it, is the same on
// every rank, whatever their own clocks said: the form of a call depends only on the class's
// call count and the record. Once every form has kTimed samples, the class keeps the form whose
// lower median is smallest (a disturbed call only slows, so with two samples the faster one);
// until then, the calls go on taking the forms in turn (a call some rank did not time, such as a
// stream-ordered one, which returns before its end, leaves no sample). A nonblocking call is
// timed to where progress saw it end. A class whose calls are never timed keeps the first form
// after kMostCalls calls.
//
// The times of a call reach the record at the next call's exchange, which comes after that
// call's form was chosen: the decision lags the last trial call by one call of the team.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gpustripe::mpi {

class FormTrials {
 public:
  // Timed calls of each form before the class decides (after each form's warm-up call).
  static constexpr int kTimed = 2;
  // Calls of a class after which it keeps the first form when it still lacks samples.
  static constexpr uint32_t kMostCalls = 32;

  // A rank's time of its latest timed trial call, as it posts it in the next entry exchange
  // (a fixed layout: it travels in the exchange's message). cls < 0: nothing to post.
  struct Posted {
    int32_t cls = -1;
    uint32_t index = 0;  // the call's number in its class
    uint64_t ns = 0;
  };

  // forms: the candidates in the order they are tried; what: the calls, for the log line.
  FormTrials(std::vector<std::string> forms, std::string what);

  // The size class of a call of `bytes` (floor of log2; 0 bytes: class 0).
  static int size_class(size_t bytes);

  // The form of the class's next call (every rank alike). Logs the decision once, at info level,
  // when the record first holds enough samples.
  const std::string& next(int cls);
  // The call of class `cls` ran in `form` on every rank (they all take the same path): its
  // number in the class when this rank should time it, -1 when it is no timed trial (a warm-up,
  // or the class has decided).
  int ran(int cls, const std::string& form);
  // This rank's time of the class's call `index`: what it posts next.
  void timed(int cls, int index, uint64_t ns);
  // What this rank posts in the next entry exchange (then nothing until it times another call).
  Posted take_posted();
  // Every rank's post of one exchange (all[r]: rank r's): the slowest rank's time joins the
  // record where every rank posted the same call.
  void record(const std::vector<Posted>& all);

  // The decided form of a class, or null while it is on trial.
  const std::string* decided(int cls) const;
  // The recorded (slowest-rank) times of a form in a class, ns, in call order.
  std::vector<uint64_t> samples(int cls, const std::string& form) const;

 private:
  struct Class {
    uint32_t calls = 0;                    // calls run in the class (on trial: call i took forms_[i % forms])
    std::map<uint32_t, uint64_t> slowest;  // by call number: the slowest rank's ns
    int decided = -1;                      // index into forms_
  };
  std::vector<std::string> forms_;
  std::string what_;
  std::map<int, Class> classes_;
  Posted posted_;
};

}  // namespace gpustripe::mpi
