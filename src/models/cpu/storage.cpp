// A CPU model's parameter and activation storage (declared in storage.h).
#include "models/cpu/storage.h"

#include <algorithm>

#include "util/check.h"

namespace mxdp::cpu {

ParamStore::ParamStore(std::vector<ParamSpec> specs) : specs_(std::move(specs)) {
  int64_t n = 0;
  offsets_.reserve(specs_.size());
  for (const auto& p : specs_) {
    offsets_.push_back(n);
    n += p.numel();
  }
  values_.assign(size_t(n), 0.f);
}

float* ParamStore::checked(int i) {
  MXDP_CHECK(i >= 0 && i < int(specs_.size()), "param index ", i, " out of range [0, ", specs_.size(), ")");
  return (*this)[i];
}

void ParamStore::set(int i, const float* host) {
  float* dst = checked(i);
  std::copy(host, host + specs_[size_t(i)].numel(), dst);
}

void resize_fresh(std::vector<float>& v, int64_t n) {
  std::vector<float>().swap(v);
  v.resize(size_t(n));
}

}  // namespace mxdp::cpu
