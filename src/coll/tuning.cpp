#include "coll/tuning.hpp"

#include "common/config.hpp"
#include "common/error.hpp"

namespace gpustripe::coll {

void Tuning::validate() const {
  auto require = [](bool ok, const char* what) {
    GS_REQUIRE(ok, GPUSTRIPE_ERR_CONFIG, "collective tuning: %s", what);
  };
  require(chunk > 0 && bcast_chunk > 0 && chain_chunk > 0, "chunks must be larger than 0 bytes");
  require(min_chunks >= 1 && max_chunks >= 1, "min_chunks and max_chunks must be at least 1");
  require(host_share <= 0.5, "host_share must be negative (automatic) or 0..0.5");
  require(bcast_host_share <= 0.5, "bcast_host_share must be negative (automatic) or 0..0.5");
  require(gather_host_share >= 0 && gather_host_share <= 0.5, "gather_host_share must be 0..0.5");
  require(push_min <= push_max, "push_min must not exceed push_max");
  require(fold_blocks_per_sm >= 0 && fold_blocks_per_sm <= 64, "fold_blocks_per_sm must be 0..64");
}

void Tuning::set(const std::string& name, const std::string& value) {
  const std::string what = "collective tuning " + name;
  auto size = [&](uint64_t& field) { field = parse_size(value, what); };
  auto count = [&](int& field) { field = static_cast<int>(parse_int(value, what)); };
  auto fraction = [&](double& field) { field = parse_double(value, what); };
  if (name == "chunk") size(chunk);
  else if (name == "min_chunks") count(min_chunks);
  else if (name == "max_chunks") count(max_chunks);
  else if (name == "bcast_chunk") size(bcast_chunk);
  else if (name == "chain_chunk") size(chain_chunk);
  else if (name == "scratch_max") size(scratch_max);
  else if (name == "sm_max") size(sm_max);
  else if (name == "rounds_min") size(rounds_min);
  else if (name == "host_min") size(host_min);
  else if (name == "host_share") fraction(host_share);
  else if (name == "bcast_sm_max_2") size(bcast_sm_max_2);
  else if (name == "chain_min") size(chain_min);
  else if (name == "bcast_host_share") fraction(bcast_host_share);
  else if (name == "oneshot_max") size(oneshot_max);
  else if (name == "push_min") size(push_min);
  else if (name == "push_max") size(push_max);
  else if (name == "ar_copy_min") size(ar_copy_min);
  else if (name == "rs_copy_min") size(rs_copy_min);
  else if (name == "ar_ce_min_2") size(ar_ce_min_2);
  else if (name == "staged_max") size(staged_max);
  else if (name == "staged_twoshot_min") size(staged_twoshot_min);
  else if (name == "rs_order") {
    GS_REQUIRE(value == "auto" || value == "chunks" || value == "rounds", GPUSTRIPE_ERR_CONFIG,
               "%s=%s: expected auto, chunks or rounds", what.c_str(), value.c_str());
    rs_order = value == "auto" ? Order::Auto : value == "chunks" ? Order::Chunks : Order::Rounds;
  } else if (name == "rs_tail") size(rs_tail);
  else if (name == "fold_blocks_per_sm") count(fold_blocks_per_sm);
  else if (name == "gather_host_share") fraction(gather_host_share);
  else if (name == "graphs") graphs = parse_bool(value, what);
  else GS_THROW(GPUSTRIPE_ERR_CONFIG, "collective tuning has no field '%s'", name.c_str());
}

}  // namespace gpustripe::coll
