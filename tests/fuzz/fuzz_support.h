#pragma once
// What every fuzz target in tests/fuzz shares: the rule that an input either loads or is refused
// with the library's own error type (anything else is a finding), and a scratch file for parsers
// that read a path.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <typeinfo>

namespace pt::fuzz {

// Runs `body`. `Refusal` is the parser's documented error type (pt::UsageError and its
// FileError, std::invalid_argument for schedule/): catching it is the parser saying no, which is
// fine. Any other exception escaping is a finding: print it and abort, so libFuzzer keeps the
// input (crashes, leaks and timeouts it reports by itself).
template <class Refusal, class Body>
void load_or_refuse(Body&& body) {
  try {
    body();
  } catch (const Refusal&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FINDING: %s escaped instead of the parser's error type: %s\n",
                 typeid(e).name(), e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "FINDING: a non-std exception escaped\n");
    std::abort();
  }
}

// A private folder under $TMPDIR for the whole run (removed at exit), and write(): the input as
// one file in it, rewritten for every input. A path is what the parser under test reads; the
// folder is private so that nothing else's files are ever in its way.
class ScratchFolder {
 public:
  ScratchFolder() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "pipetrain-fuzz-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    path_ = tmpl;
  }
  ~ScratchFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Writes `size` bytes as the file `name` in the folder and returns its path.
  std::filesystem::path write(const char* name, const uint8_t* data, size_t size) const {
    const std::filesystem::path file = path_ / name;
    std::FILE* f = std::fopen(file.c_str(), "wb");
    if (!f || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
      std::perror(file.c_str());
      std::abort();
    }
    return file;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace pt::fuzz
