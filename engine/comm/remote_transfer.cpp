#include "engine/comm/remote_transfer.h"

#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

void PendingSend::wait(std::string_view what) {
  if (header_request) header_request->wait(what);
  if (payload_request) payload_request->wait(what);
}

int transfer_tag(TransferKind kind, int stage, int index, int num_stages,
                 const Communicator& comm) {
  const int64_t tag =
      (static_cast<int64_t>(index) * num_stages + stage) * kTransferKinds + static_cast<int>(kind);
  if (tag > comm.max_tag())
    throw UsageError(
        fmt::format("micro-batch/chunk {} of stage {} needs message tag {} but the communicator "
                    "allows at most {}: use fewer micro-batches or stages",
                    index, stage, tag, comm.max_tag()));
  return static_cast<int>(tag);
}

std::unique_ptr<PendingSend> send_tensor(Communicator& comm, int dst, int tag, Tensor value) {
  auto p = std::make_unique<PendingSend>();
  const Shape& s = value.shape();
  p->header[0] = static_cast<int64_t>(value.dtype());
  p->header[1] = s.rank();
  for (int i = 0; i < s.rank(); ++i) p->header[static_cast<size_t>(2 + i)] = s[i];
  p->keep = std::move(value);
  p->header_request = comm.isend(p->header.data(), sizeof(p->header), dst, tag);
  if (!p->keep.bytes()) return p;
  if (p->keep.host_accessible() || comm.device_memory()) {
    p->payload_request = comm.isend(p->keep.data(), p->keep.bytes(), dst, tag);
  } else {  // device memory: through the host
    p->host.resize(p->keep.bytes());
    p->keep.backend()->copy_to_host(p->host.data(), p->keep.data(), p->keep.bytes());
    p->payload_request = comm.isend(p->host.data(), p->host.size(), dst, tag);
  }
  return p;
}

Tensor recv_tensor(Communicator& comm, Backend& backend, int src, int tag, std::string_view what) {
  std::array<int64_t, 8> header{};
  comm.recv(header.data(), sizeof(header), src, tag, what);
  const int64_t rank = header[1];
  if (header[0] < 0 || header[0] > static_cast<int64_t>(DType::i32) || rank < 0 ||
      rank > Shape::kMaxRank)
    throw std::runtime_error(
        fmt::format("{}: received a malformed tensor header (dtype {}, rank {}) from rank {}", what,
                    header[0], rank, comm.world_rank(src)));
  Shape shape;
  for (int64_t i = 0; i < rank; ++i) shape.push_back(header[static_cast<size_t>(2 + i)]);
  Tensor t = backend.empty(shape, static_cast<DType>(header[0]));
  if (!t.bytes()) return t;
  if (backend.host_accessible() || comm.device_memory()) {
    comm.recv(t.data(), t.bytes(), src, tag, what);
  } else {  // device memory: through the host
    std::vector<std::byte> host(t.bytes());
    comm.recv(host.data(), host.size(), src, tag, what);
    backend.copy_from_host(t.data(), host.data(), host.size());
  }
  return t;
}

}  // namespace pt
