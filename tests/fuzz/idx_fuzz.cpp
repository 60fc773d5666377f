// Fuzz target: the IDX reader (engine/data/idx.h), plain and gzipped. The first byte picks how
// the rest reaches the reader: even, as the file itself (so corrupt gzip streams are fuzzed too);
// odd, gzip-compressed first (so the header and data are fuzzed through zlib's decompression
// as well). Every input must load or be refused with FileError, and what loads must hold
// exactly the product of its dimensions.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "engine/core/error.h"
#include "engine/data/idx.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const pt::fuzz::ScratchFolder scratch;
  if (size == 0) return 0;
  const bool compress = (data[0] & 1) != 0;
  std::filesystem::path file = scratch.path() / "input.idx.gz";
  if (!compress) {
    file = scratch.write("input.idx", data + 1, size - 1);
  } else {
    gzFile gz = gzopen(file.c_str(), "wb1");
    if (!gz || (size > 1 && gzwrite(gz, data + 1, static_cast<unsigned>(size - 1)) <= 0) ||
        gzclose(gz) != Z_OK)
      std::abort();
  }
  pt::fuzz::load_or_refuse<pt::UsageError>([&] {
    const pt::IdxArray a = pt::read_idx(file);
    uint64_t elements = 1;
    for (int64_t d : a.dims) elements *= static_cast<uint64_t>(d);
    if (a.dims.empty() || a.data.size() != elements) std::abort();
  });
  return 0;
}
