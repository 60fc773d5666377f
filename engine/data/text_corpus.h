#pragma once
// Byte-level text as a token corpus: every byte is a token (vocab 256), so there is no tokenizer
// to train or ship. Loaded from a file, or from Debian's King James Bible (the `bible` program of
// package bible-kjv, 4.4 MB of ASCII), cached after the first run.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "engine/data/token_corpus.h"

namespace pt {

constexpr int64_t kByteVocab = 256;

// The bytes as tokens [0, 256). `source` says where they came from (TokenCorpus).
TokenCorpus byte_corpus(std::span<const uint8_t> bytes, std::string source);

// Reads a text file as bytes. Throws FileError when it cannot be read or is empty.
TokenCorpus load_text_corpus(const std::filesystem::path& path);

// The cache folder: $XDG_CACHE_HOME/pipetrain, else $HOME/.cache/pipetrain, else
// <temp dir>/pipetrain-cache.
std::filesystem::path default_cache_dir();

// The King James Bible, one verse per line ("Ge1:1 In the beginning God created ..."), as
// printed by `bible -f Gen1:1-Rev22:21`. Read from cache_dir/bible-kjv.cache when present and
// its size and CRC-32 check; else runs `program` (stopped after `timeout_seconds`) and writes
// that file atomically (if the folder is not writable the text is still returned). Throws
// FileError naming the package (bible-kjv) when the program is missing, fails, prints too little
// or does not finish in time.
TokenCorpus bible_corpus(const std::filesystem::path& cache_dir = default_cache_dir(),
                         const std::string& program = "bible", double timeout_seconds = 60);

}  // namespace pt
