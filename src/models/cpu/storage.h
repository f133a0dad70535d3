// Where a CPU model keeps its numbers: its parameters in one fp32 array
// (ParamStore), and activation buffers sized per batch shape (resize_fresh).
#pragma once

#include <cstdint>
#include <vector>

#include "models/model.h"

namespace mxdp::cpu {

// The parameters of `specs`, in their order, each numel floats, all 0 at first.
class ParamStore {
 public:
  explicit ParamStore(std::vector<ParamSpec> specs);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t num_parameters() const { return int64_t(values_.size()); }
  // Param i's floats; i must be a valid index (the model's own).
  float* operator[](int i) { return values_.data() + offsets_[size_t(i)]; }
  const float* operator[](int i) const { return values_.data() + offsets_[size_t(i)]; }
  // Param i's floats; an index out of range throws (for callers outside the model).
  float* checked(int i);
  // Copies param i's numel floats from host.
  void set(int i, const float* host);
  // Param i's ParamSpec::fp8_linear (the model's FP8 compute decides it: model.h's Fp8Compute).
  void set_fp8_linear(int i, bool on) { specs_[size_t(i)].fp8_linear = on; }

 private:
  std::vector<ParamSpec> specs_;
  std::vector<int64_t> offsets_;  // element offset of each param in values_
  std::vector<float> values_;
};

// v holds n floats of unspecified value; its memory is released first, so that
// shrinking B or T gives memory back.
void resize_fresh(std::vector<float>& v, int64_t n);

}  // namespace mxdp::cpu
