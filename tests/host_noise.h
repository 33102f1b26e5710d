// Speed reports as a loaded host makes them, for the planner's hysteresis
// tests (planner_test.cc, job_state_test.cc). Header-only, for tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace eps {
namespace testing_noise {

// A loaded host's noise: each report within +-15 % of the worker's time, and
// now and then (8 % of the reports) an episode of 1 to `longest` reports 1.5x
// to 3x slower (the process descheduled, a checkpoint written beside it),
// episodes at least two reports apart: shorter than the window, unlike a real
// slowdown.
class HostNoise {
 public:
  HostNoise(size_t workers, uint64_t seed, int longest)
      : rng_(seed), left_(workers, 0), gap_(workers, 0), factor_(workers, 1), longest_(longest) {}
  std::vector<double> Reports(const std::vector<double>& times) {
    std::vector<double> r;
    for (size_t i = 0; i < times.size(); ++i) {
      if (left_[i] == 0 && gap_[i] == 0 && Uniform(0, 1) < 0.08) {
        left_[i] = std::uniform_int_distribution<int>(1, longest_)(rng_);
        factor_[i] = Uniform(1.5, 3.0);
      }
      double f = Uniform(0.85, 1.15);
      if (left_[i] > 0) {
        f *= factor_[i];
        if (--left_[i] == 0) gap_[i] = 2;
      } else if (gap_[i] > 0) {
        --gap_[i];
      }
      r.push_back(times[i] * f);
    }
    return r;
  }

 private:
  double Uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng_);
  }
  std::mt19937_64 rng_;
  std::vector<int> left_, gap_;
  std::vector<double> factor_;
  int longest_;
};

}  // namespace testing_noise
}  // namespace eps
