#pragma once
// Errors that cross the engine's boundary. Every message says what was wrong, with the numbers,
// and what would fix it (see STYLE.md). Callers at the top (examples) print what() and exit != 0.
#include <stdexcept>
#include <string>

namespace pt {

// Input the user gave us is wrong: flags, shapes, files. Exit code 2 in the examples.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A model definition does not fit together (builder errors).
class ShapeError : public UsageError {
 public:
  using UsageError::UsageError;
};

// A file on disk is missing, truncated or corrupt.
class FileError : public UsageError {
 public:
  using UsageError::UsageError;
};

// A device ran out of memory; the message carries requested, current and limit bytes.
class OutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A blocking wait ran past its timeout.
class TimeoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace pt
