#pragma once
// Files of uint16 token ids made by a tokenizer, in the two formats GPT trainers share:
//
//   llm.c     a header of 256 int32, little-endian: [0] magic 20240520, [1] version 1,
//             [2] token count N, the rest 0; then N uint16 tokens (llmc/dataloader.h reads it,
//             dev/data/data_common.py writes it; GPT-2's tokenizer, vocab 50257)
//   uint16    nanoGPT's train.bin/val.bin: uint16 tokens and nothing else; the vocabulary is
//             not in the file (nanoGPT keeps it in meta.pkl, or it is GPT-2's)
//
// and the choice between them and byte-level text (text_corpus.h) that --data-format makes.
// Little-endian on disk whatever the host. A file is read with one read into the token vector:
// token files run to gigabytes.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

#include "engine/data/token_corpus.h"

namespace pt {

constexpr int32_t kLlmcMagic = 20240520;
constexpr int32_t kLlmcVersion = 1;            // uint16 tokens
constexpr int64_t kLlmcHeaderBytes = 256 * 4;  // 256 int32
// GPT-2's tokenizer, the one llm.c's files are made with (its header does not say).
constexpr int64_t kGpt2Vocab = 50257;

enum class DataFormat { automatic, text, llmc, uint16 };

// "auto", "text", "llmc", "uint16"; parse throws UsageError naming the choices.
DataFormat parse_data_format(std::string_view name);
std::string_view data_format_name(DataFormat format);

// What `automatic` is for this file: llmc when its first int32 is llm.c's magic, else uint16
// when its name ends in ".bin", else text. Reads 4 bytes at most, and nothing from a file that
// is not a regular one (the loader then says why it cannot be read).
DataFormat detect_data_format(const std::filesystem::path& path);

// An llm.c token file (format above), every token below `vocab`. Throws FileError naming the
// file for a missing or unreadable file, one too short for the header, another magic, another
// version, a token count that disagrees with the file's size (truncated or with bytes after its
// tokens) or no token at all; UsageError for a token >= vocab (its position and value).
TokenCorpus load_llmc_file(const std::filesystem::path& path, int64_t vocab);

// A raw file of uint16 tokens (nanoGPT's format), every token below `vocab`. Throws FileError
// for a missing, unreadable or empty file or an odd number of bytes; UsageError for a token
// >= vocab.
TokenCorpus load_uint16_file(const std::filesystem::path& path, int64_t vocab);

// The vocabulary of `format`'s data (not automatic): text 256 (a given one is refused: UsageError),
// llmc the given one or GPT-2's 50257, uint16 the given one (none: UsageError, as the file does
// not say it). `path` is for the messages. Looks at nothing but its arguments.
int64_t data_vocab(const std::filesystem::path& path, DataFormat format,
                   std::optional<int64_t> vocab);

// The corpus pipetrain-gpt trains on (--data PATH --data-format FORMAT --vocab V): `automatic` is
// detect_data_format's choice; text is load_text_corpus, llmc and uint16 their loaders above,
// with data_vocab(V). Throws UsageError or FileError saying what to change.
TokenCorpus load_corpus(const std::filesystem::path& path, DataFormat format,
                        std::optional<int64_t> vocab);

}  // namespace pt
