#include "router/health.h"

#include <gtest/gtest.h>

#include <vector>

#include "router/replica.h"

namespace kvserve::router {
namespace {

struct Probes {
  std::vector<bool> up;
  std::vector<std::pair<int, bool>> changes;
};

HealthChecker Make(Probes& p) {
  return HealthChecker(
      static_cast<int>(p.up.size()),
      [&p](int r) { return static_cast<bool>(p.up[static_cast<size_t>(r)]); },
      [&p](int r, bool healthy) { p.changes.emplace_back(r, healthy); },
      std::chrono::milliseconds(1000));
}

TEST(HealthCheckerTest, ReplicasStartOutOfThePoolUntilARoundPassesThem) {
  Probes p{{true, false, true}, {}};
  HealthChecker h = Make(p);
  EXPECT_EQ(h.num_healthy(), 0);
  h.CheckAll();
  EXPECT_TRUE(h.healthy(0));
  EXPECT_FALSE(h.healthy(1));
  EXPECT_EQ(h.num_healthy(), 2);
  EXPECT_EQ(p.changes, (std::vector<std::pair<int, bool>>{{0, true}, {2, true}}));
}

TEST(HealthCheckerTest, AFailedProbeOrAReportedFailureTakesAReplicaOutUntilItPasses) {
  Probes p{{true, true}, {}};
  HealthChecker h = Make(p);
  h.CheckAll();
  p.changes.clear();
  h.ReportFailure(1);
  h.ReportFailure(1);  // once out, a second report changes nothing
  EXPECT_FALSE(h.healthy(1));
  p.up[0] = false;
  h.CheckAll();  // 1 passes again, 0 fails
  EXPECT_FALSE(h.healthy(0));
  EXPECT_TRUE(h.healthy(1));
  EXPECT_EQ(p.changes, (std::vector<std::pair<int, bool>>{{1, false}, {0, false}, {1, true}}));
}

TEST(HealthCheckerTest, TheThreadRunsRoundsUntilStopped) {
  Probes p{{true}, {}};
  HealthChecker h(
      1, [&p](int) { return static_cast<bool>(p.up[0]); }, nullptr, std::chrono::milliseconds(1));
  h.Start();
  h.Stop();  // returns promptly whatever the interval
  h.Stop();
}

TEST(ReplicaSpecTest, AnOriginWithItsEventEndpoints) {
  Result<ReplicaSpec> s = ParseReplicaSpec(
      "http://127.0.0.1:8001/,events=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558,topic=kv");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->origin, "http://127.0.0.1:8001");
  EXPECT_EQ(s->events.endpoint, "tcp://127.0.0.1:5557");
  EXPECT_EQ(s->events.replay_endpoint, "tcp://127.0.0.1:5558");
  EXPECT_EQ(s->events.topic, "kv");
  s = ParseReplicaSpec("http://h:1");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->events.endpoint.empty());
}

TEST(ReplicaSpecTest, MistakesAreRefusedWithWhatToWrite) {
  EXPECT_FALSE(ParseReplicaSpec("127.0.0.1:8001").ok());               // no scheme
  EXPECT_FALSE(ParseReplicaSpec("http://h:1,event=tcp://h:2").ok());   // unknown part
  EXPECT_FALSE(ParseReplicaSpec("http://h:1,events=").ok());           // empty value
  EXPECT_FALSE(ParseReplicaSpec("http://h:1,events=h:2").ok());        // not ZeroMQ
  EXPECT_FALSE(ParseReplicaSpec("http://h:1,replay=tcp://h:3").ok());  // replay alone
  EXPECT_EQ(ParseReplicaSpec("http://h:1,x=1").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::router
