// Two candidates elect one leader through a Lease on the stand-in; when the
// leader stops renewing, the other takes over.
#include <atomic>

#include "fixture.h"
#include "kube/leader_election.h"

namespace tessera::kube::it {
namespace {

class LeaderElectionIT : public KubeIntegrationTest {
 protected:
  LeaderElectionConfig Config(const std::string& id, std::atomic<int>* started) {
    LeaderElectionConfig c;
    c.lease_namespace = "kube-system";
    c.lease_name = "tessera-scheduler";
    c.identity = id;
    c.lease_duration = std::chrono::seconds(2);
    c.renew_deadline = std::chrono::milliseconds(1500);
    c.retry_period = std::chrono::milliseconds(100);
    c.release_on_stop = false;  // behave like a crashed process
    c.on_started_leading = [started] { ++*started; };
    EXPECT_TRUE(ValidateLeaderElectionConfig(c).ok());
    return c;
  }
};

TEST_F(LeaderElectionIT, OneLeaderThenFailover) {
  ApiLeaseStore store_a(client_.get(), std::chrono::milliseconds(1000));
  ApiLeaseStore store_b(client_.get(), std::chrono::milliseconds(1000));
  std::atomic<int> a_started{0}, b_started{0};
  auto a = std::make_unique<LeaderElector>(&store_a, Config("a", &a_started));
  auto b = std::make_unique<LeaderElector>(&store_b, Config("b", &b_started));
  a->Start();
  b->Start();
  ASSERT_TRUE(WaitFor([&] { return a->IsLeader() || b->IsLeader(); }));
  // Exactly one leads, and keeps leading while it renews.
  for (int i = 0; i < 30; ++i) {
    ASSERT_FALSE(a->IsLeader() && b->IsLeader());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  LeaderElector* leader = a->IsLeader() ? a.get() : b.get();
  LeaderElector* follower = leader == a.get() ? b.get() : a.get();
  const std::string leader_id = leader->config().identity;
  auto lease = LeasesApi(client_.get()).Get("kube-system", "tessera-scheduler");
  ASSERT_TRUE(lease.ok()) << lease.error().message;
  EXPECT_EQ(lease->holder_identity, leader_id);
  EXPECT_EQ(lease->lease_duration_seconds, 2);
  const int transitions = lease->lease_transitions;
  EXPECT_TRUE(WaitFor([&] { return follower->Holder() == leader_id; }));

  // The leader stops renewing (crash: no release). The follower takes over
  // once the lease expires; both are never leaders at once.
  leader->Stop();
  EXPECT_FALSE(leader->IsLeader());
  ASSERT_TRUE(WaitFor([&] { return follower->IsLeader(); }));
  lease = LeasesApi(client_.get()).Get("kube-system", "tessera-scheduler");
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->holder_identity, follower->config().identity);
  EXPECT_EQ(lease->lease_transitions, transitions + 1);
  a->Stop();
  b->Stop();
  EXPECT_EQ(a_started + b_started, 2);
}

TEST_F(LeaderElectionIT, LeaderStepsDownWhenTheApiServerIsGone) {
  ApiLeaseStore store(client_.get(), std::chrono::milliseconds(500));
  std::atomic<int> started{0};
  std::atomic<int> stopped{0};
  auto config = Config("solo", &started);
  config.on_stopped_leading = [&stopped] { ++stopped; };
  LeaderElector solo(&store, config);
  solo.Start();
  ASSERT_TRUE(WaitFor([&] { return solo.IsLeader(); }));
  server_->Stop();
  ASSERT_TRUE(WaitFor([&] { return stopped.load() == 1; }));
  EXPECT_FALSE(solo.IsLeader());
  ASSERT_TRUE(server_->Start().ok());
  // Still a ready candidate: it leads again when the API returns.
  ASSERT_TRUE(WaitFor([&] { return solo.IsLeader(); }));
  EXPECT_EQ(started.load(), 2);
  solo.Stop();
}

}  // namespace
}  // namespace tessera::kube::it
