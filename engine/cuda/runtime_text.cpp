#include "engine/cuda/runtime_text.h"

#include <cstring>

namespace pt::cuda {

std::string version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

void write_message(char* message, size_t size, std::string_view text) {
  if (message == nullptr || size == 0) return;
  const size_t n = text.size() < size - 1 ? text.size() : size - 1;
  std::memcpy(message, text.data(), n);
  message[n] = '\0';
}

}  // namespace pt::cuda
