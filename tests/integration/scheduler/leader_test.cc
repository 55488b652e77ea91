// Two tessera-schedulers with leader election on: exactly one binds, the other
// answers binds with a clear error and stays ready; when the leader stops, the
// follower takes over.
#include "fixture.h"

namespace tessera::scheduler::it {
namespace {

SchedulerConfig Elected(SchedulerConfig c, const std::string& identity) {
  c.leader_elect = true;
  c.identity = identity;
  c.lease_namespace = "kube-system";
  c.lease_name = "tessera-scheduler";
  c.lease_duration = std::chrono::milliseconds(2000);
  c.renew_deadline = std::chrono::milliseconds(1500);
  c.retry_period = std::chrono::milliseconds(200);
  c.takeover_settle = std::chrono::milliseconds(1000);
  return c;
}

TEST_F(SchedulerIntegrationTest, OnlyTheLeaderBindsAndAFollowerTakesOver) {
  auto nodes = AddNodes(1, 2, 81920, 10);
  auto a = StartScheduler(Elected(Config(), "sched-a"));
  auto b = StartScheduler(Elected(Config(), "sched-b"));
  ASSERT_TRUE(WaitFor([&] { return a->IsLeader() != b->IsLeader(); }));
  Scheduler* leader = a->IsLeader() ? a.get() : b.get();
  Scheduler* follower = a->IsLeader() ? b.get() : a.get();
  EXPECT_TRUE(follower->Ready());
  ASSERT_TRUE(
      WaitFor([&] { return follower->state().Stats().nodes == 1 && leader->state().Stats().nodes == 1; }));

  Json p1 = AddPod("p1", 1, 1000, 10);
  Attempt refused = ScheduleOnce(follower->port(), p1, nodes);
  EXPECT_EQ(refused.outcome, Outcome::kError);
  EXPECT_NE(refused.message.find("not the leader"), std::string::npos) << refused.message;
  EXPECT_EQ(follower->state().Stats().reservations, 0u);
  Attempt bound = ScheduleOnce(leader->port(), p1, nodes);
  EXPECT_EQ(bound.outcome, Outcome::kBound) << bound.message;

  // The leader goes away (releasing its lease); the follower takes over and
  // already knows p1's slice from the API.
  if (leader == a.get()) {
    a.reset();
  } else {
    b.reset();
  }
  ASSERT_TRUE(WaitFor([&] { return follower->IsLeader(); }));
  ASSERT_TRUE(WaitFor([&] { return follower->state().Stats().pods == 1; }));
  // It binds once a Binding its predecessor may still have had in flight
  // can no longer land (takeover_settle); until then its refusal says so.
  Json p2 = AddPod("p2", 1, 1000, 10);
  ASSERT_TRUE(WaitFor([&] {
    bound = ScheduleOnce(follower->port(), p2, nodes);
    if (bound.outcome == Outcome::kError) {
      EXPECT_NE(bound.message.find("took the leader lease over"), std::string::npos) << bound.message;
    }
    return bound.outcome == Outcome::kBound;
  })) << bound.message;
  int count = 0;
  auto problems = CheckNoOvercommit(*server_, &count);
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(count, 2);
}

}  // namespace
}  // namespace tessera::scheduler::it
