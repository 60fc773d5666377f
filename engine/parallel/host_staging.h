#pragma once
// A tensor's floats as host memory, for the collectives that exchange through host buffers (the
// sharded optimizer, full sharding): the tensor itself where its backend's memory is host memory,
// else a copy in `stage`, written back by host_floats_done after the caller changed it.
#include <vector>

#include "engine/core/backend.h"

namespace pt {

inline float* host_floats(Backend& backend, const Tensor& flat, std::vector<float>& stage) {
  if (flat.numel() == 0 || backend.host_accessible()) return flat.f32();
  stage.resize(static_cast<size_t>(flat.numel()));
  backend.copy_to_host(stage.data(), flat.data(), flat.bytes());
  return stage.data();
}

inline void host_floats_done(Backend& backend, const Tensor& flat,
                             const std::vector<float>& stage) {
  if (flat.numel() == 0 || backend.host_accessible()) return;
  backend.copy_from_host(flat.data(), stage.data(), flat.bytes());
}

}  // namespace pt
