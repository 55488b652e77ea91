#include "kube/leader_election.h"

#include <gtest/gtest.h>

#include <map>

namespace tessera::kube {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// An in-memory Lease with the API server's compare-and-swap semantics, and a
// switch to make it unreachable.
class MemoryLeaseStore : public LeaseStore {
 public:
  ApiResult<LeaseRecord> Get(const std::string& ns, const std::string& name) override {
    if (down) return ApiError{0, "TransportError", "connection refused"};
    if (!lease || lease->name != name || lease->namespace_ != ns)
      return ApiError{404, "NotFound", "not found"};
    return *lease;
  }
  ApiResult<LeaseRecord> Create(const LeaseRecord& l) override {
    if (down) return ApiError{0, "TransportError", "connection refused"};
    if (lease) return ApiError{409, "AlreadyExists", "exists"};
    lease = l;
    lease->resource_version = std::to_string(++rv);
    return *lease;
  }
  ApiResult<LeaseRecord> Update(const LeaseRecord& l) override {
    if (down) return ApiError{0, "TransportError", "connection refused"};
    if (!lease) return ApiError{404, "NotFound", "not found"};
    if (l.resource_version != lease->resource_version) return ApiError{409, "Conflict", "modified"};
    lease = l;
    lease->resource_version = std::to_string(++rv);
    ++updates;
    return *lease;
  }

  std::optional<LeaseRecord> lease;
  int rv = 0;
  int updates = 0;
  bool down = false;
};

LeaderElectionConfig Config(const std::string& id, int* started, int* stopped) {
  LeaderElectionConfig c;
  c.lease_namespace = "kube-system";
  c.lease_name = "tessera-scheduler";
  c.identity = id;
  c.lease_duration = seconds(15);
  c.renew_deadline = seconds(10);
  c.retry_period = seconds(2);
  c.on_started_leading = [started] { ++*started; };
  c.on_stopped_leading = [stopped] { ++*stopped; };
  return c;
}

// Each test starts with a fake clock, an empty lease store, and the start and
// stop counts of its first candidate.
class LeaderElectionTest : public ::testing::Test {
 protected:
  FakeClock clock;
  MemoryLeaseStore store;
  int started = 0, stopped = 0;
};

TEST_F(LeaderElectionTest, ValidatesDurations) {
  int a = 0, b = 0;
  EXPECT_TRUE(ValidateLeaderElectionConfig(Config("a", &a, &b)).ok());
  auto c = Config("a", &a, &b);
  c.renew_deadline = seconds(15);
  EXPECT_FALSE(ValidateLeaderElectionConfig(c).ok());
  c = Config("a", &a, &b);
  c.retry_period = seconds(10);
  EXPECT_FALSE(ValidateLeaderElectionConfig(c).ok());
  c = Config("", &a, &b);
  EXPECT_FALSE(ValidateLeaderElectionConfig(c).ok());
}

TEST_F(LeaderElectionTest, FirstCandidateCreatesTheLeaseAndLeads) {
  LeaderElector a(&store, Config("a", &started, &stopped), &clock);
  EXPECT_FALSE(a.IsLeader());
  EXPECT_EQ(a.Tick(), seconds(2));
  EXPECT_TRUE(a.IsLeader());
  EXPECT_EQ(started, 1);
  ASSERT_TRUE(store.lease.has_value());
  EXPECT_EQ(store.lease->holder_identity, "a");
  EXPECT_EQ(store.lease->lease_duration_seconds, 15);
  EXPECT_EQ(store.lease->lease_transitions, 0);
  EXPECT_EQ(store.lease->renew_time, clock.WallNow());
}

TEST_F(LeaderElectionTest, FollowerWaitsForExpiryThenTakesOverWithATransition) {
  int a_started = 0, a_stopped = 0, b_started = 0, b_stopped = 0;
  LeaderElector a(&store, Config("a", &a_started, &a_stopped), &clock);
  LeaderElector b(&store, Config("b", &b_started, &b_stopped), &clock);
  a.Tick();
  b.Tick();
  EXPECT_TRUE(a.IsLeader());
  EXPECT_FALSE(b.IsLeader());
  EXPECT_EQ(b.Holder(), "a");

  // a renews every 2 s; b never gets it.
  for (int i = 0; i < 10; ++i) {
    clock.Advance(seconds(2));
    a.Tick();
    b.Tick();
    ASSERT_TRUE(a.IsLeader());
    ASSERT_FALSE(b.IsLeader());
  }
  // a stops renewing (hung process). b must wait the full lease duration.
  const auto last_renew = clock.WallNow();
  clock.Advance(seconds(14));
  b.Tick();
  EXPECT_FALSE(b.IsLeader());
  EXPECT_FALSE(a.IsLeader()) << "a must consider itself deposed after the renew deadline";
  clock.Advance(seconds(1));  // renewTime + 15 s: expired
  b.Tick();
  EXPECT_TRUE(b.IsLeader());
  EXPECT_EQ(store.lease->holder_identity, "b");
  EXPECT_EQ(store.lease->lease_transitions, 1);
  EXPECT_GT(*store.lease->acquire_time, last_renew);

  // a wakes up: it sees b's lease and steps down for good.
  a.Tick();
  EXPECT_FALSE(a.IsLeader());
  EXPECT_EQ(a_stopped, 1);
  EXPECT_EQ(a.Holder(), "b");
}

TEST_F(LeaderElectionTest, LeaderStepsDownWhenItCannotRenewBeforeTheDeadline) {
  LeaderElector a(&store, Config("a", &started, &stopped), &clock);
  a.Tick();
  ASSERT_TRUE(a.IsLeader());
  store.down = true;
  for (int i = 0; i < 4; ++i) {  // 8 s of failed renewals: still within the 10 s deadline
    clock.Advance(seconds(2));
    a.Tick();
    EXPECT_TRUE(a.IsLeader()) << i;
    EXPECT_EQ(stopped, 0);
  }
  clock.Advance(seconds(2));
  a.Tick();
  EXPECT_FALSE(a.IsLeader());
  EXPECT_EQ(stopped, 1);
  // The API comes back; nobody else took the lease, so a leads again (followers stay ready).
  store.down = false;
  clock.Advance(seconds(2));
  a.Tick();
  EXPECT_TRUE(a.IsLeader());
  EXPECT_EQ(started, 2);
  EXPECT_EQ(store.lease->lease_transitions, 0);
}

TEST_F(LeaderElectionTest, IsLeaderTurnsFalseAtTheDeadlineEvenWithoutATick) {
  LeaderElector a(&store, Config("a", &started, &stopped), &clock);
  a.Tick();
  clock.Advance(milliseconds(9999));
  EXPECT_TRUE(a.IsLeader());
  clock.Advance(milliseconds(1));
  EXPECT_FALSE(a.IsLeader());  // e.g. while a renew request hangs
}

TEST_F(LeaderElectionTest, ConflictingUpdateLosesTheRace) {
  LeaseRecord expired;
  expired.namespace_ = "kube-system";
  expired.name = "tessera-scheduler";
  expired.holder_identity = "old";
  expired.lease_duration_seconds = 15;
  expired.renew_time = clock.WallNow() - seconds(60);
  expired.lease_transitions = 4;
  ASSERT_TRUE(store.Create(expired).ok());

  // A store that changes the lease between our Get and Update.
  class RacingStore : public LeaseStore {
   public:
    explicit RacingStore(MemoryLeaseStore* s) : s_(s) {}
    ApiResult<LeaseRecord> Get(const std::string& ns, const std::string& n) override {
      auto r = s_->Get(ns, n);
      LeaseRecord other = *r;
      other.holder_identity = "c";
      (void)s_->Update(other);  // someone else wins meanwhile
      return r;
    }
    ApiResult<LeaseRecord> Create(const LeaseRecord& l) override { return s_->Create(l); }
    ApiResult<LeaseRecord> Update(const LeaseRecord& l) override { return s_->Update(l); }
    MemoryLeaseStore* s_;
  } racing(&store);
  LeaderElector b(&racing, Config("b", &started, &stopped), &clock);
  b.Tick();
  EXPECT_FALSE(b.IsLeader());
  EXPECT_EQ(store.lease->holder_identity, "c");
}

// A Lease that existed before this leadership may have a predecessor whose
// requests are still in flight: TookOverAt says when the takeover happened.
// Creating the Lease means nobody led before.
TEST_F(LeaderElectionTest, TookOverAtMarksLeadershipTakenFromAnExistingLease) {
  int a_started = 0, a_stopped = 0;
  LeaderElector a(&store, Config("a", &a_started, &a_stopped), &clock);
  EXPECT_FALSE(a.TookOverAt().has_value()) << "not leading";
  a.Tick();
  ASSERT_TRUE(a.IsLeader());
  EXPECT_FALSE(a.TookOverAt().has_value()) << "a created the Lease";
  clock.Advance(seconds(2));
  a.Tick();
  EXPECT_FALSE(a.TookOverAt().has_value()) << "a renewal is no takeover";

  // A new process with the same identity (a restarted replica) renews the
  // Lease its earlier incarnation held: that earlier one's Bindings may land.
  clock.Advance(seconds(1));
  int c_started = 0, c_stopped = 0;
  LeaderElector again(&store, Config("a", &c_started, &c_stopped), &clock);
  again.Tick();
  ASSERT_TRUE(again.IsLeader());
  ASSERT_TRUE(again.TookOverAt().has_value());
  EXPECT_EQ(*again.TookOverAt(), clock.Now());

  // Another candidate after expiry; and the mark goes when leadership does.
  int b_started = 0, b_stopped = 0;
  LeaderElector b(&store, Config("b", &b_started, &b_stopped), &clock);
  clock.Advance(seconds(15));
  const auto taken = clock.Now();
  b.Tick();
  ASSERT_TRUE(b.IsLeader());
  ASSERT_TRUE(b.TookOverAt().has_value());
  EXPECT_EQ(*b.TookOverAt(), taken);
  clock.Advance(seconds(2));
  b.Tick();
  EXPECT_EQ(*b.TookOverAt(), taken) << "renewals keep the takeover time";
  again.Tick();
  EXPECT_FALSE(again.IsLeader());
  EXPECT_FALSE(again.TookOverAt().has_value());
}

TEST_F(LeaderElectionTest, ReleaseOnStopFreesTheLease) {
  auto a = std::make_unique<LeaderElector>(&store, Config("a", &started, &stopped), &clock);
  a->Tick();
  a->Stop();
  EXPECT_EQ(stopped, 1);
  EXPECT_EQ(store.lease->holder_identity, "");
  int b_started = 0, b_stopped = 0;
  LeaderElector b(&store, Config("b", &b_started, &b_stopped), &clock);
  b.Tick();  // no waiting for expiry
  EXPECT_TRUE(b.IsLeader());
  EXPECT_EQ(store.lease->lease_transitions, 1);
}

TEST(LeaseRecordTest, MicroTimeRoundTripAndJson) {
  auto t = ParseMicroTime("2024-02-29T23:59:58.123456Z");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(FormatMicroTime(*t), "2024-02-29T23:59:58.123456Z");
  EXPECT_EQ(FormatMicroTime(*ParseMicroTime("2024-03-01T01:00:00+01:00")), "2024-03-01T00:00:00.000000Z");
  EXPECT_FALSE(ParseMicroTime("yesterday").ok());
  EXPECT_FALSE(ParseMicroTime("2024-03-01T01:00:00").ok());

  LeaseRecord r;
  r.namespace_ = "ns";
  r.name = "l";
  r.holder_identity = "me";
  r.lease_duration_seconds = 15;
  r.renew_time = *t;
  r.lease_transitions = 3;
  auto back = LeaseRecord::FromJson(r.ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->holder_identity, "me");
  EXPECT_EQ(back->renew_time, r.renew_time);
  EXPECT_FALSE(back->acquire_time.has_value());
  EXPECT_EQ(back->lease_transitions, 3);
  EXPECT_EQ(r.ToJson()["spec"]["renewTime"], "2024-02-29T23:59:58.123456Z");
  EXPECT_FALSE(LeaseRecord::FromJson({{"metadata", {{"name", "l"}}}, {"spec", {{"renewTime", 5}}}}).ok());
}

}  // namespace
}  // namespace tessera::kube
