#pragma once
// Skip connections across stages (builder .save()/.add_saved()): the activation goes straight
// from the stage that saves it to the stage that adds it, and its gradient straight back, without
// passing through the stages between. Both directions are the same motion, so one pair of
// functions serves them, parameterised by the direction:
//
//   direction  after stage s's ...   s sends                          to the stage that
//   forward    F                     activations it saved (skips_out)  adds them (consumer)
//   backward   backward (B or I)     gradients of what it added (in)   saved them (producer)
//
// and before that compute, s receives the other half: forward, the activations it adds; backward,
// the gradients of what it saved. Neither waits on a send, and the consumer's F runs after the
// producer's F in any valid schedule (the producer's backward after the consumer's), so skips add
// no cycle to the schedule's dependencies.
#include <functional>
#include <string>

#include "engine/pipeline/layout.h"
#include "engine/pipeline/mailbox.h"

namespace pt {

// What the routing needs from the executor of one device, for one micro-batch.
struct SkipIo {
  int microbatch = 0;
  // The board of `stage`'s micro-batch when that stage is on this device (a direct hand-off).
  std::function<SkipBoard&(int stage)> board_here;
  std::function<bool(int stage)> is_here;
  // Through the transport to the device of `stage`, and from it.
  std::function<void(int to_stage, const MessageKey& key, Tensor value)> send;
  std::function<Tensor(int from_stage, const MessageKey& key, const std::string& what)> receive;
};

// After stage s's compute in `dir`: moves what it produced for other stages off `board`.
void send_skips(Direction dir, int s, SkipBoard& board, const Model& model,
                const PipelineLayout& layout, const SkipIo& io);

// Before stage s's compute in `dir`: puts on `board` what other devices' stages sent it (a stage
// on this device already put it there).
void receive_skips(Direction dir, int s, SkipBoard& board, const Model& model,
                   const PipelineLayout& layout, const SkipIo& io);

}  // namespace pt
