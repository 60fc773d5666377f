#pragma once
// Fuzz input as a command line: the bytes split into words at every newline or NUL byte, after
// the program's name, as argv is built for main().
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pt::fuzz {

struct CommandLine {
  std::vector<std::string> words;  // words[0] is the program
  std::vector<char*> argv;         // into words, then nullptr

  CommandLine(const char* program, const uint8_t* data, size_t size) {
    words.emplace_back(program);
    std::string word;
    for (size_t i = 0; i <= size; ++i) {
      if (i == size || data[i] == '\n' || data[i] == '\0') {
        if (i < size || !word.empty()) words.push_back(word);
        word.clear();
      } else {
        word.push_back(static_cast<char>(data[i]));
      }
    }
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(words.size()); }
};

}  // namespace pt::fuzz
