#include "engine/comm/take_turns.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace pt {

namespace {

struct Turns {
  std::mutex mutex;
  std::condition_variable changed;
  int turn = 0;  // the piece that may run
  bool finished[2] = {false, false};
};

// The turns the calling thread takes part in, and which piece it is.
thread_local Turns* current = nullptr;
thread_local int piece = 0;

void wait_for_turn(Turns& t, int me) {
  std::unique_lock lock(t.mutex);
  t.changed.wait(lock, [&] { return t.turn == me; });
}

void finish(Turns& t, int me) {
  {
    std::lock_guard lock(t.mutex);
    t.finished[me] = true;
    t.turn = 1 - me;
  }
  t.changed.notify_all();
}

// Runs `work` as piece `me` of `t`, keeping what it throws.
void run_piece(Turns& t, int me, const std::function<void()>& work, std::exception_ptr& error) {
  current = &t;
  piece = me;
  try {
    work();
  } catch (...) {
    error = std::current_exception();
  }
  current = nullptr;
  finish(t, me);
}

}  // namespace

void TakeTurns::run(const std::function<void()>& first, const std::function<void()>& second) {
  if (current) {  // inside a piece already
    first();
    second();
    return;
  }
  Turns turns;
  std::exception_ptr errors[2];
  std::thread other([&] {
    wait_for_turn(turns, 1);
    run_piece(turns, 1, second, errors[1]);
  });
  run_piece(turns, 0, first, errors[0]);
  other.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

bool TakeTurns::partner_running() {
  if (!current) return false;
  std::lock_guard lock(current->mutex);
  return !current->finished[1 - piece];
}

void TakeTurns::pass() {
  if (!current) return;
  Turns& t = *current;
  const int me = piece;
  {
    std::unique_lock lock(t.mutex);
    if (t.finished[1 - me]) return;
    t.turn = 1 - me;
    t.changed.notify_all();
    t.changed.wait(lock, [&] { return t.turn == me; });
  }
}

}  // namespace pt
