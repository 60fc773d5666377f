#pragma once
// Runs one function per rank of an in-process group, each on its own thread, and hands back what
// each rank threw. Most tests store each rank's results and check them on the test's thread
// afterwards, where a failure's CAPTURE context is the test's own.
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"

namespace pt::test {

using Group = std::vector<std::unique_ptr<Communicator>>;

// body(Communicator&) runs on every rank; element r of the result is rank r's exception or null.
template <typename F>
std::vector<std::exception_ptr> run_ranks(Group& group, F body) {
  std::vector<std::exception_ptr> errors(group.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < group.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        body(*group[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// The message of what rank r threw, or "" when it did not throw.
inline std::string message_of(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
}

// Rethrows the first rank's exception (for tests where no rank should fail).
inline void rethrow_first(const std::vector<std::exception_ptr>& errors) {
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace pt::test
