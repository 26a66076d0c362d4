#include "router/health.h"

#include <gtest/gtest.h>

#include <vector>

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

}  // namespace
}  // namespace kvserve::router
