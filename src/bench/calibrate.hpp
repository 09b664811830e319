// Calibration: measures the model's parameters on the node through the Backend
// interface (streams, events, copy_async; not the engine, whose plans depend on them):
//   - alpha/beta per hop kind (peer, d2h, h2d, local) from a size sweep, least squares
//     on t = alpha + n / beta weighted by 1/t (relative error at every size), beta then
//     pinned to the largest copy;
//   - per-GPU host link rates, per-pair peer rates (mesh bundles);
//   - shared capacities from concurrent copies: one GPU to two (NVLink egress), two to
//     one (ingress), all GPUs D2H at once (host memory), D2H + H2D on one GPU (recorded);
//   - the staging synchronization epsilon from a two-hop relay of small chunks.
// Runs on the emulated backend too (the numbers are then memcpy's, and say so).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "model/profile.hpp"

namespace gpustripe {

class Backend;
struct Topology;

struct CalibrationOptions {
  bool quick = false;  // fewer sizes and repeats, 64 MB largest copy (16 MB on the emulated backend)
  int reps = 0;        // timed repeats per point (0: 3 quick, 7 full); the median is kept
};

// fraction in [0, 1] and the step being measured.
using CalibrationProgress = std::function<void(double fraction, const std::string& step)>;

// The measured profile of the node `backend` runs (its GPUs are `topo`'s, in order).
// Throws ERR_NOT_SUPPORTED for fewer than 2 devices.
Profile calibrate(Backend& backend, const Topology& topo, const CalibrationOptions& opt,
                  const CalibrationProgress& progress = {});

// Least squares of t = alpha + n / beta weighted by 1/t. Returns {alpha_us, beta_gbps};
// alpha is clamped at 0. Needs two distinct sizes.
std::pair<double, double> fit_hockney(const std::vector<double>& bytes, const std::vector<double>& us);

// Standard deviation of repetitions, the highest and lowest 5% left out (a far repetition
// does not set it); 0 for fewer than 3 left. Not the interquartile range: a relay's
// repetitions fall in two groups (4x H200: ~52 and ~59-60 us, its wake-ups fast or
// not), and quartiles jump between them from one calibration to the next (3.5 us enqueued,
// 0.3 us replayed in one profile).
double spread_sd(std::vector<double> us);

}  // namespace gpustripe
