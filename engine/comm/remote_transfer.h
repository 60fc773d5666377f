#pragma once
// Pipeline tensors between processes: a fixed-size header (dtype, rank, dims) and then the
// payload, both with one tag, so shapes travel with the data (a smaller last micro-batch, or a
// batch of shorter sequences, needs no agreement beforehand). Sends never block: the caller
// keeps the PendingSend until it completed.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/backend.h"

namespace pt {

// What a message between processes carries; part of its tag, so kinds never match each other.
// Pipeline messages (activations, gradients, skip values: engine/pipeline/transport.cpp) number
// their micro-batch and channel in the tag's index.
enum class TransferKind : int {
  activation = 0,
  gradient = 1,
  tied_gradient = 2,
};
constexpr int kTransferKinds = 3;

struct PendingSend {
  std::array<int64_t, 8> header{};  // dtype, rank, dims (must outlive the request)
  Tensor keep;                      // the payload (must outlive the request)
  std::vector<std::byte> host;      // the payload staged in host memory, for a GPU tensor
  std::unique_ptr<CommRequest> header_request, payload_request;
  void wait(std::string_view what);
};

// The tag of a transfer to `stage` (the receiving stage) with message number `index`; throws
// UsageError when it exceeds the communicator's largest tag.
int transfer_tag(TransferKind kind, int stage, int index, int num_stages, const Communicator& comm);

// A GPU tensor goes through host memory unless the communicator takes device memory.
std::unique_ptr<PendingSend> send_tensor(Communicator& comm, int dst, int tag, Tensor value);
// Receives into new memory of `backend`; throws TimeoutError (from the communicator) naming `what`.
Tensor recv_tensor(Communicator& comm, Backend& backend, int src, int tag, std::string_view what);

}  // namespace pt
