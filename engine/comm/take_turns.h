#pragma once
// Two pieces of one device's work that take turns on its compute: how the forward of one
// micro-batch hides the tensor-parallel collectives of another. A row-parallel layer's
// all-reduce (or, with sequence parallelism, its reduce-scatter and the next all-gather) is
// needed by the very next layer, so no work of the same micro-batch can run beside it; the next
// micro-batch's forward can. Each piece runs on a thread of its own but only one computes at a
// time: a collective called while turns are taken is started on the device's collective thread
// (engine/comm/collective_thread.h), the turn passes to the other piece, and the collective is
// waited for when the turn comes back (engine/parallel/tensor_parallel_group.cpp does this).
//
// The turn passes only at collectives, and every rank makes the same collectives in the same
// order, so the pieces interleave alike on every rank and the collectives start in the same
// order everywhere, as the communicators require (DeepSpeed's Domino and DualPipe overlap two
// micro-batches in this way; here the executor pairs adjacent forwards of its list,
// engine/pipeline/executor.cpp). Only one piece running at a time also means the two need no
// locks between them: each hand-over is a mutex's release and acquire.
#include <functional>

namespace pt {

class TakeTurns {
 public:
  // Runs `first` on this thread and `second` on a new one, `first` having the first turn; returns
  // when both have finished, rethrowing what one threw (`first`'s if both did). A piece that
  // finishes or throws gives the turn to the other for good. Runs the two one after the other
  // when called from inside a piece (turns do not nest).
  static void run(const std::function<void()>& first, const std::function<void()>& second);

  // Whether the calling thread is a piece of run() whose partner has not finished: a collective
  // it starts can then be hidden behind the partner's compute.
  static bool partner_running();

  // Gives the turn to the partner and returns when it is back (at once when the partner has
  // finished, or outside run()). The wait ends when the partner passes, finishes or throws; its
  // own waits (collectives, transfers) all time out, so this one ends too.
  static void pass();
};

}  // namespace pt
