// FormTrials (src/mpi/coll_trials.hpp): the ranks of a team choose between forms by timing the
// calls themselves, and every rank takes the same form on every call. Ranks are played here by
// one FormTrials each, their entry exchange by handing every rank every rank's post.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "mpi/coll_trials.hpp"

using gpustripe::mpi::FormTrials;

namespace {

// The team's ranks making calls of one size class, each rank timing its trial calls at its own
// us per form (us[rank][form]); untimed[rank]: call numbers that rank does not time (as a
// stream-ordered call, or one that went another way on it).
struct Team {
  std::vector<FormTrials> ranks;
  std::vector<std::map<std::string, double>> us;
  std::vector<std::vector<int>> untimed;

  explicit Team(std::vector<std::map<std::string, double>> times) : us(std::move(times)), untimed(us.size()) {
    for (size_t r = 0; r < us.size(); ++r) ranks.emplace_back(std::vector<std::string>{"sm", "direct"}, "test");
  }

  // One call of class cls on every rank: the form all took (the test fails where they differ).
  std::string call(int cls, int number) {
    std::vector<std::string> forms;
    std::vector<FormTrials::Posted> posted;
    for (FormTrials& t : ranks) {
      forms.push_back(t.next(cls));
      posted.push_back(t.take_posted());
    }
    for (size_t r = 1; r < forms.size(); ++r) EXPECT_EQ(forms[r], forms[0]) << "rank " << r << " at call " << number;
    for (FormTrials& t : ranks) t.record(posted);
    for (size_t r = 0; r < ranks.size(); ++r) {
      const int index = ranks[r].ran(cls, forms[r]);
      bool skip = false;
      for (int u : untimed[r]) skip = skip || u == number;
      if (!skip) ranks[r].timed(cls, index, static_cast<uint64_t>(us[r][forms[r]] * 1e3));
    }
    return forms[0];
  }
  std::vector<std::string> calls(int cls, int count) {
    std::vector<std::string> out;
    for (int i = 0; i < count; ++i) out.push_back(call(cls, i));
    return out;
  }
};

using Forms = std::vector<std::string>;

}  // namespace

TEST(CollTrials, TrialCallsTakeTheFormsInTurnThenKeepTheFaster) {
  // Each form's first call is a warm-up; a call's times reach the others with the next call,
  // after that call's form was chosen: the class decides at its 8th call.
  Team direct_faster({{{"sm", 100}, {"direct", 50}}, {{"sm", 110}, {"direct", 60}}});
  EXPECT_EQ(direct_faster.calls(20, 11), (Forms{"sm", "direct", "sm", "direct", "sm", "direct", "sm", "direct",
                                                "direct", "direct", "direct"}));
  ASSERT_NE(direct_faster.ranks[0].decided(20), nullptr);
  EXPECT_EQ(*direct_faster.ranks[0].decided(20), "direct");
  // The slowest rank's time of each timed call (calls 2 and 4 took sm, 3 and 5 direct).
  EXPECT_EQ(direct_faster.ranks[0].samples(20, "sm"), (std::vector<uint64_t>{110000, 110000}));
  EXPECT_EQ(direct_faster.ranks[1].samples(20, "direct"), (std::vector<uint64_t>{60000, 60000}));

  Team sm_faster({{{"sm", 40}, {"direct", 50}}, {{"sm", 40}, {"direct", 50}}});
  EXPECT_EQ(sm_faster.calls(20, 10), (Forms{"sm", "direct", "sm", "direct", "sm", "direct", "sm", "sm", "sm", "sm"}));
}

TEST(CollTrials, EveryRankTakesTheSameFormWhenTheirOwnTimesDisagree) {
  // Ranks 0 and 1 find direct faster, rank 2 finds it far slower: the slowest rank's times say
  // sm, and every rank takes it (Team::call checks every call's form on every rank).
  Team team({{{"sm", 100}, {"direct", 50}}, {{"sm", 100}, {"direct", 50}}, {{"sm", 120}, {"direct", 400}}});
  const Forms forms = team.calls(12, 12);
  EXPECT_EQ(forms.back(), "sm");
  for (const FormTrials& t : team.ranks) {
    ASSERT_NE(t.decided(12), nullptr);
    EXPECT_EQ(*t.decided(12), "sm");
  }
  // Rank 0 on its own times would have taken direct.
  Team alone({{{"sm", 100}, {"direct", 50}}});
  EXPECT_EQ(alone.calls(12, 12).back(), "direct");
}

TEST(CollTrials, ACallSomeRankDidNotTimeLeavesNoSampleAndTheTrialsGoOn) {
  Team team({{{"sm", 100}, {"direct", 50}}, {{"sm", 100}, {"direct", 50}}});
  team.untimed[1] = {3};  // rank 1 does not time call 3 (direct): one direct sample fewer
  const Forms forms = team.calls(5, 12);
  // Calls 2..7 are timed on both ranks but for 3: direct's second sample is call 7's, which
  // reaches the record at call 8, so call 9 is the first decided one.
  EXPECT_EQ(forms, (Forms{"sm", "direct", "sm", "direct", "sm", "direct", "sm", "direct", "sm", "direct", "direct",
                          "direct"}));
  EXPECT_EQ(team.ranks[0].samples(5, "direct"), (std::vector<uint64_t>{50000, 50000}));
}

TEST(CollTrials, SizeClassesAreTimedApart) {
  EXPECT_EQ(FormTrials::size_class(0), 0);
  EXPECT_EQ(FormTrials::size_class(1), 0);
  EXPECT_EQ(FormTrials::size_class(size_t(1) << 20), 20);
  EXPECT_EQ(FormTrials::size_class((size_t(2) << 20) - 1), 20);
  EXPECT_EQ(FormTrials::size_class(size_t(2) << 20), 21);
  Team team({{{"sm", 100}, {"direct", 50}}, {{"sm", 100}, {"direct", 50}}});
  team.calls(20, 10);
  ASSERT_NE(team.ranks[0].decided(20), nullptr);
  EXPECT_EQ(team.ranks[0].decided(21), nullptr);
  EXPECT_EQ(team.calls(21, 2), (Forms{"sm", "direct"}));  // a new class starts its own trials
}

TEST(CollTrials, AClassNeverTimedKeepsTheFirstFormAfterItsMostCalls) {
  Team team({{{"sm", 100}, {"direct", 50}}, {{"sm", 100}, {"direct", 50}}});
  for (int i = 0; i < int(FormTrials::kMostCalls); ++i) team.untimed[0].push_back(i);  // rank 0 times none
  const Forms forms = team.calls(7, FormTrials::kMostCalls + 3);
  for (size_t i = 0; i < FormTrials::kMostCalls; ++i) EXPECT_EQ(forms[i], i % 2 ? "direct" : "sm") << i;
  for (size_t i = FormTrials::kMostCalls; i < forms.size(); ++i) EXPECT_EQ(forms[i], "sm") << i;
  ASSERT_NE(team.ranks[1].decided(7), nullptr);
  EXPECT_EQ(*team.ranks[1].decided(7), "sm");
}
