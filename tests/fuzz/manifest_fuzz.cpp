// Fuzz target: the checkpoint manifest reader (engine/checkpoint/manifest.h) on arbitrary
// manifest.json text, in a folder with no pieces. Every input must load or be refused with
// FileError; a manifest that loads must write back (manifest_json) to text that loads to the same
// manifest, and verify_checkpoint must report its (missing) pieces without throwing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "engine/checkpoint/manifest.h"
#include "engine/core/error.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

bool same(const pt::CheckpointManifest& a, const pt::CheckpointManifest& b) {
  if (a.metadata != b.metadata || a.layout != b.layout || a.pieces.size() != b.pieces.size() ||
      a.tensors.size() != b.tensors.size())
    return false;
  for (size_t i = 0; i < a.pieces.size(); ++i)
    if (a.pieces[i].file != b.pieces[i].file || a.pieces[i].bytes != b.pieces[i].bytes ||
        a.pieces[i].world_rank != b.pieces[i].world_rank)
      return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const pt::CheckpointTensor &x = a.tensors[i], &y = b.tensors[i];
    if (x.name != y.name || x.piece != y.piece || x.dtype != y.dtype || x.shape != y.shape ||
        x.offset != y.offset || x.bytes != y.bytes || x.crc32 != y.crc32)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const pt::fuzz::ScratchFolder scratch;
  scratch.write(pt::kManifestName, data, size);
  pt::fuzz::load_or_refuse<pt::UsageError>([&] {
    const pt::CheckpointManifest m = pt::read_manifest(scratch.path());
    for (const pt::CheckpointTensor& t : m.tensors)
      if (m.find(t.name) != &t) std::abort();
    (void)m.total_bytes();
    const std::string text = pt::manifest_json(m);
    scratch.write(pt::kManifestName, reinterpret_cast<const uint8_t*>(text.data()), text.size());
    if (!same(pt::read_manifest(scratch.path()), m)) {
      std::fprintf(stderr, "FINDING: the manifest changed on writing it back:\n%s\n", text.c_str());
      std::abort();
    }
    (void)pt::verify_checkpoint(scratch.path());
  });
  return 0;
}
