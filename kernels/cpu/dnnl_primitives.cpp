#include "kernels/cpu/dnnl_primitives.h"

namespace pt::cpu {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void execute(Backend& backend, const DnnlPrimitive& p, std::unordered_map<int, dnnl::memory> args) {
  Scratch scratch(backend, p.scratchpad_bytes);
  if (p.scratchpad_bytes)
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratchpad, dnnl_engine(), scratch.get()));
  thread_local dnnl::stream stream(dnnl_engine());
  p.primitive.execute(stream, args);
  stream.wait();
}

dnnl::memory wrap_memory(const dnnl::memory::desc& desc, const void* ptr) {
  return dnnl::memory(desc, dnnl_engine(), const_cast<void*>(ptr));
}

}  // namespace pt::cpu
