// Fuzz target: the safetensors reader (engine/io/safetensors.h) on arbitrary file contents: the
// 8-byte length, the JSON header (dtypes, shapes, offsets, metadata) and the data buffer. Every
// input must load or be refused with FileError, and load_safetensors must load exactly what
// read_safetensors_index promised.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const pt::fuzz::ScratchFolder scratch;
  const std::filesystem::path file = scratch.write("input.safetensors", data, size);
  pt::fuzz::load_or_refuse<pt::UsageError>([&] {
    const pt::SafetensorsIndex index = pt::read_safetensors_index(file);
    const pt::SafetensorsFile loaded = pt::load_safetensors(file);
    // What the index promised is what was loaded, tensor for tensor.
    if (loaded.tensors.size() != index.entries.size()) std::abort();
    for (size_t i = 0; i < index.entries.size(); ++i) {
      const pt::HostTensor& t = loaded.tensors[i];
      if (t.name != index.entries[i].name || t.data.size() != index.entries[i].bytes ||
          loaded.find(t.name) == nullptr)
        std::abort();
    }
  });
  return 0;
}
