// Arrival processes: when the load generator may send its next request.
//
// A rate of R requests/s with burstiness b draws inter-arrival gaps from Gamma(shape b,
// scale 1 / (R b)): the mean gap is 1/R whatever b is; b = 1 is a Poisson process, b < 1 is
// burstier (gaps more uneven), b > 1 more regular. An infinite rate means "no gaps": the
// concurrency limit alone shapes the load. Seeded: the same seed gives the same gaps.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "kvserve/status.h"
#include "loadgen/random.h"

namespace kvserve::loadgen {

struct ArrivalConfig {
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s; inf = no gaps
  double burstiness = 1.0;                                        // gamma shape; 1 = Poisson
  uint64_t seed = 0;
};

Status ValidateArrivalConfig(const ArrivalConfig& config);

class ArrivalProcess {
 public:
  // REQUIRES: ValidateArrivalConfig(config).ok().
  explicit ArrivalProcess(const ArrivalConfig& config);

  // Seconds between the previous arrival and the next one (0 for an infinite rate).
  double NextGapSeconds();
  // "poisson", "gamma" or "none" (infinite rate).
  std::string Name() const;

 private:
  ArrivalConfig config_;
  Rng rng_;
};

}  // namespace kvserve::loadgen
