#include "loadgen/arrival.h"

#include <cmath>

#include <fmt/format.h>

namespace kvserve::loadgen {

Status ValidateArrivalConfig(const ArrivalConfig& config) {
  if (!(config.request_rate > 0)) {
    return InvalidArgument(fmt::format("--request-rate must be > 0 (got {}); leave it out for "
                                       "no gaps between requests", config.request_rate));
  }
  if (!(config.burstiness > 0) || std::isinf(config.burstiness)) {
    return InvalidArgument(fmt::format("--burstiness must be a finite number > 0 (got {}); 1 = "
                                       "Poisson", config.burstiness));
  }
  return Status::Ok();
}

ArrivalProcess::ArrivalProcess(const ArrivalConfig& config)
    : config_(config), rng_(Rng::DeriveSeed(config.seed, /*label=*/0xA881)) {}

double ArrivalProcess::NextGapSeconds() {
  if (std::isinf(config_.request_rate)) return 0.0;
  const double mean = 1.0 / config_.request_rate;
  if (config_.burstiness == 1.0) return rng_.Exponential(mean);
  return rng_.Gamma(config_.burstiness, mean / config_.burstiness);
}

std::string ArrivalProcess::Name() const {
  if (std::isinf(config_.request_rate)) return "none";
  return config_.burstiness == 1.0 ? "poisson" : "gamma";
}

}  // namespace kvserve::loadgen
