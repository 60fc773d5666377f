#include "engine/io/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <system_error>
#include <unordered_map>
#include <unordered_set>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"

namespace pt {
namespace {

// The writer keeps its own order; the reader parses into std::map-backed objects (ordered_json's
// key lookup is linear, which made reading n tensors O(n^2): 160,000 tensors took 29 s) and
// sorts by offset, remembering each key's position in the header for ties.
using Json = nlohmann::ordered_json;
using ParsedJson = nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";
// The reference implementation refuses larger headers; so do we (it also bounds our allocation).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// ---- typed copies -----------------------------------------------------------------------------

template <class T>
HostTensor from_values(std::string name, Shape shape, DType dtype, std::span<const T> values) {
  if (static_cast<int64_t>(values.size()) != shape.numel())
    throw UsageError(fmt::format("tensor '{}': shape {} has {} elements but {} values were given",
                                 name, shape.str(), shape.numel(), values.size()));
  HostTensor t{std::move(name), dtype, shape, std::vector<std::byte>(values.size_bytes())};
  if (!values.empty()) std::memcpy(t.data.data(), values.data(), values.size_bytes());
  return t;
}

template <class T>
std::vector<T> to_values(const HostTensor& t, DType want) {
  if (t.dtype != want)
    throw UsageError(fmt::format("tensor '{}' has dtype {}, not {}", t.name, dtype_name(t.dtype),
                                 dtype_name(want)));
  std::vector<T> out(t.data.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), t.data.data(), out.size() * sizeof(T));
  return out;
}

// ---- reading helpers ----------------------------------------------------------------------------

[[noreturn]] void bad_file(const std::filesystem::path& path, const std::string& what) {
  throw FileError(fmt::format("{}: {}", path.string(), what));
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

void read_exactly(std::FILE* f, const std::filesystem::path& path, void* dst, size_t n,
                  const char* what) {
  if (n == 0) return;
  if (std::fread(dst, 1, n, f) != n) {
    const bool eof = std::feof(f) != 0;
    const int err = errno;
    bad_file(path, fmt::format("reading {} ({} bytes) failed: {}", what, n,
                               eof ? "unexpected end of file (did it shrink while being read?)"
                                   : std::generic_category().message(err)));
  }
}

// A JSON value that must be a non-negative integer.
bool as_u64(const ParsedJson& j, uint64_t* out) {
  if (!j.is_number_unsigned()) return false;
  *out = j.get<uint64_t>();
  return true;
}

// One tensor's header entry, checked on its own (offsets against the buffer come later).
struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;
  size_t header_position = 0;  // orders empty tensors that share an offset
};

Entry parse_entry(const std::filesystem::path& path, const std::string& name, const ParsedJson& j) {
  auto bad = [&](const std::string& what) {
    bad_file(path, fmt::format("tensor '{}': {}", name, what));
  };
  if (!j.is_object()) bad(fmt::format("header entry is {}, expected an object", j.type_name()));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!j.contains(key)) bad(fmt::format("header entry has no \"{}\"", key));

  Entry e;
  e.name = name;
  const ParsedJson& dtype = j["dtype"];
  if (!dtype.is_string()) bad("\"dtype\" is not a string");
  const std::string dtype_str = dtype.get<std::string>();
  if (!dtype_from_name(dtype_str, &e.dtype))
    bad(
        fmt::format("dtype \"{}\" is not supported (pipetrain reads F32, BF16, F16 and I32): "
                    "convert the tensor before loading",
                    dtype_str));

  const ParsedJson& shape = j["shape"];
  if (!shape.is_array()) bad("\"shape\" is not an array");
  if (shape.size() > static_cast<size_t>(Shape::kMaxRank))
    bad(fmt::format("shape has rank {}, more than the {} pipetrain supports", shape.size(),
                    Shape::kMaxRank));
  uint64_t bytes = dtype_size(e.dtype);
  for (const ParsedJson& d : shape) {
    uint64_t dim = 0;
    if (!as_u64(d, &dim))
      bad(fmt::format("shape {} has an entry that is not a non-negative integer", shape.dump()));
    if (__builtin_mul_overflow(bytes, dim, &bytes) || dim > uint64_t{1} << 62)
      bad(fmt::format("shape {} is too large", shape.dump()));
    e.shape.push_back(static_cast<int64_t>(dim));
  }

  const ParsedJson& offsets = j["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !as_u64(offsets[0], &e.begin) ||
      !as_u64(offsets[1], &e.end))
    bad(fmt::format("\"data_offsets\" {} is not a pair of non-negative integers [begin, end]",
                    offsets.dump()));
  if (e.end < e.begin)
    bad(fmt::format("data_offsets [{}, {}] end before they begin", e.begin, e.end));
  if (e.end - e.begin != bytes)
    bad(fmt::format("data_offsets [{}, {}] span {} bytes, but shape {} of {} needs {}", e.begin,
                    e.end, e.end - e.begin, e.shape.str(), dtype_str, bytes));
  return e;
}

std::map<std::string, std::string> parse_metadata(const std::filesystem::path& path,
                                                  const ParsedJson& j) {
  if (!j.is_object())
    bad_file(path,
             fmt::format("\"__metadata__\" is {}, expected an object of strings", j.type_name()));
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string())
      bad_file(path, fmt::format("\"__metadata__\" value of \"{}\" is {}, expected a string", key,
                                 value.type_name()));
    out[key] = value.get<std::string>();
  }
  return out;
}

// The header's top-level keys in order, and the first one named twice (a JSON object would
// silently keep one). A separate SAX pass: nlohmann's parse callback makes parsing quadratic
// (it scans the parent object at every object's end).
struct TopLevelKeys : nlohmann::json_sax<ParsedJson> {
  std::unordered_map<std::string, size_t> position;
  std::string duplicate;
  int depth = 0;

  bool key(string_t& k) override {
    if (depth == 1 && !position.emplace(k, position.size()).second && duplicate.empty())
      duplicate = k;
    return true;
  }
  bool start_object(size_t) override { return ++depth, true; }
  bool end_object() override { return --depth, true; }
  bool start_array(size_t) override { return ++depth, true; }
  bool end_array() override { return --depth, true; }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw e;  // not reached: the DOM parse before it has refused invalid JSON
  }
};

}  // namespace

// ---- HostTensor / SafetensorsFile
// ------------------------------------------------------------------

HostTensor HostTensor::from_f32(std::string name, Shape shape, std::span<const float> values) {
  return from_values(std::move(name), shape, DType::f32, values);
}
HostTensor HostTensor::from_i32(std::string name, Shape shape, std::span<const int32_t> values) {
  return from_values(std::move(name), shape, DType::i32, values);
}
std::vector<float> HostTensor::to_f32() const { return to_values<float>(*this, DType::f32); }
std::vector<int32_t> HostTensor::to_i32() const { return to_values<int32_t>(*this, DType::i32); }

const HostTensor* SafetensorsFile::find(std::string_view name) const {
  for (const HostTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

// ---- save
// -----------------------------------------------------------------------------------------

SafetensorsWriter::SafetensorsWriter(const std::filesystem::path& path,
                                     std::vector<SafetensorsHeaderEntry> entries,
                                     const std::map<std::string, std::string>& metadata)
    : entries_(std::move(entries)), path_(path) {
  // The header text is joined entry by entry: inserting n keys into one ordered_json object
  // searches it each time (O(n^2); 160,000 tensors took 37 s).
  auto dump = [&](const Json& j) {
    try {
      return j.dump(-1, ' ', false, Json::error_handler_t::strict);
    } catch (const Json::exception& e) {
      throw UsageError(
          fmt::format("cannot save {}: a tensor name or metadata string is not valid UTF-8 ({})",
                      path.string(), e.what()));
    }
  };
  std::string text = "{";
  auto add_key = [&](const std::string& key, const Json& value) {
    if (text.size() > 1) text += ',';
    text += dump(Json(key));
    text += ':';
    text += dump(value);
  };
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    add_key(std::string(kMetadataKey), meta);
  }
  std::unordered_set<std::string_view> names;
  uint64_t offset = 0;
  for (const SafetensorsHeaderEntry& t : entries_) {
    if (t.name == kMetadataKey)
      throw UsageError(fmt::format("cannot save {}: \"{}\" is reserved and cannot name a tensor",
                                   path.string(), kMetadataKey));
    if (!names.insert(t.name).second)
      throw UsageError(
          fmt::format("cannot save {}: two tensors are named '{}'", path.string(), t.name));
    const uint64_t bytes = static_cast<uint64_t>(t.shape.numel()) * dtype_size(t.dtype);
    Json entry = Json::object();
    entry["dtype"] = std::string(dtype_name(t.dtype));
    entry["shape"] = Json::array();
    for (int64_t d : t.shape) entry["shape"].push_back(d);
    entry["data_offsets"] = {offset, offset + bytes};
    add_key(t.name, entry);
    offset += bytes;
  }
  text += '}';
  text.append((8 - text.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned
  std::byte length[8];
  for (size_t i = 0; i < 8; ++i)
    length[i] = static_cast<std::byte>((text.size() >> (8 * i)) & 0xFF);
  data_start_ = 8 + text.size();
  writer_ = std::make_unique<AtomicFileWriter>(path);
  writer_->write(length);
  writer_->write(std::as_bytes(std::span(text)));
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::write(std::span<const std::byte> bytes) {
  if (next_ >= entries_.size() && !bytes.empty())
    throw UsageError(fmt::format("cannot save {}: more data than the {} tensors declared",
                                 path_.string(), entries_.size()));
  if (next_ >= entries_.size()) return;
  const SafetensorsHeaderEntry& t = entries_[next_];
  const uint64_t want = static_cast<uint64_t>(t.shape.numel()) * dtype_size(t.dtype);
  if (written_of_next_ + bytes.size() > want)
    throw UsageError(
        fmt::format("cannot save {}: tensor '{}' of shape {} {} needs {} bytes but "
                    "more were given",
                    path_.string(), t.name, t.shape.str(), dtype_name(t.dtype), want));
  writer_->write(bytes);
  written_of_next_ += bytes.size();
  // Tensors of zero bytes are complete at once: step over them too.
  while (next_ < entries_.size() &&
         written_of_next_ == static_cast<uint64_t>(entries_[next_].shape.numel()) *
                                 dtype_size(entries_[next_].dtype)) {
    ++next_;
    written_of_next_ = 0;
  }
}

void SafetensorsWriter::commit() {
  write({});  // steps over trailing empty tensors
  if (next_ != entries_.size())
    throw UsageError(fmt::format("cannot save {}: tensor '{}' received only {} of its bytes",
                                 path_.string(), entries_[next_].name, written_of_next_));
  writer_->commit();
}

void save_safetensors(const std::filesystem::path& path, const SafetensorsFile& file) {
  std::vector<SafetensorsHeaderEntry> entries;
  for (const HostTensor& t : file.tensors) {
    const uint64_t bytes = static_cast<uint64_t>(t.shape.numel()) * dtype_size(t.dtype);
    if (t.data.size() != bytes)
      throw UsageError(fmt::format(
          "cannot save {}: tensor '{}' of shape {} {} needs {} bytes but holds {}", path.string(),
          t.name, t.shape.str(), dtype_name(t.dtype), bytes, t.data.size()));
    entries.push_back({t.name, t.dtype, t.shape});
  }
  SafetensorsWriter writer(path, std::move(entries), file.metadata);
  for (const HostTensor& t : file.tensors) writer.write(t.data);
  writer.commit();
}

// ---- load
// -----------------------------------------------------------------------------------------

SafetensorsIndex read_safetensors_index(const std::filesystem::path& path) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    const int err = errno;
    bad_file(path, fmt::format("cannot open: {}", std::generic_category().message(err)));
  }
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) bad_file(path, fmt::format("cannot read its size: {}", ec.message()));

  // -- the length field and the header
  if (file_size < 8)
    bad_file(path, fmt::format("file size {} is smaller than the 8-byte header length: the file "
                               "is truncated or not safetensors",
                               file_size));
  unsigned char length_bytes[8];
  read_exactly(f.get(), path, length_bytes, 8, "the header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | length_bytes[i];
  if (header_len > file_size - 8)
    bad_file(path, fmt::format("header length {} exceeds file size {}: the file is truncated or "
                               "not safetensors",
                               header_len, file_size));
  if (header_len > kMaxHeaderBytes)
    bad_file(path, fmt::format("header length {} exceeds the limit of {} bytes: the file is "
                               "corrupt or not safetensors",
                               header_len, kMaxHeaderBytes));
  std::string text(header_len, '\0');
  read_exactly(f.get(), path, text.data(), text.size(), "the header");
  if (text.empty() || text[0] != '{')
    bad_file(path, "header does not start with '{': the file is corrupt or not safetensors");

  // -- JSON; the callback sees every top-level key, which catches duplicates that a JSON object
  //    would silently merge.
  TopLevelKeys keys;
  ParsedJson header;
  try {
    header = ParsedJson::parse(text);
    ParsedJson::sax_parse(text, &keys);
  } catch (const ParsedJson::exception& e) {
    bad_file(path, fmt::format("header is not valid JSON ({}): the file is corrupt", e.what()));
  }
  if (!header.is_object())
    bad_file(path, fmt::format("header is {}, expected a JSON object", header.type_name()));
  if (!keys.duplicate.empty())
    bad_file(path, fmt::format("header names '{}' twice", keys.duplicate));

  SafetensorsIndex out;
  out.file_size = file_size;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey)
      out.metadata = parse_metadata(path, value);
    else {
      entries.push_back(parse_entry(path, key, value));
      entries.back().header_position = keys.position.at(key);
    }
  }

  // -- offsets: in range, and tiling the data buffer exactly (no overlap, no gap, no tail), as
  //    the reference implementation requires. Ties (empty tensors) keep their header order.
  const uint64_t data_len = file_size - 8 - header_len;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.header_position < b.header_position;
  });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.end > data_len)
      bad_file(path, fmt::format("tensor '{}': data_offsets [{}, {}] reach past the data buffer "
                                 "of {} bytes: the file is truncated",
                                 e.name, e.begin, e.end, data_len));
    if (e.begin < covered)
      bad_file(path, fmt::format("tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", prev->name,
                                 prev->begin, prev->end, e.name, e.begin, e.end));
    if (e.begin > covered)
      bad_file(path, fmt::format("bytes [{}, {}) of the data buffer belong to no tensor (before "
                                 "'{}'): the header is corrupt",
                                 covered, e.begin, e.name));
    covered = e.end;
    prev = &e;
  }
  if (covered != data_len)
    bad_file(path, fmt::format("the data buffer has {} bytes but the tensors cover only {}: the "
                               "file has trailing bytes or a corrupt header",
                               data_len, covered));

  out.entries.reserve(entries.size());
  const uint64_t data_start = 8 + header_len;
  for (Entry& e : entries)
    out.entries.push_back(
        {std::move(e.name), e.dtype, e.shape, data_start + e.begin, e.end - e.begin});
  return out;
}

SafetensorsFile load_safetensors(const std::filesystem::path& path) {
  SafetensorsIndex index = read_safetensors_index(path);
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    const int err = errno;
    bad_file(path, fmt::format("cannot open: {}", std::generic_category().message(err)));
  }
  SafetensorsFile out;
  out.metadata = std::move(index.metadata);
  out.tensors.reserve(index.entries.size());
  // The entries tile the data buffer in order: one sequential read.
  if (!index.entries.empty() &&
      std::fseek(f.get(), static_cast<long>(index.entries.front().offset), SEEK_SET) != 0)
    bad_file(path, "cannot seek to the data buffer");
  for (SafetensorsEntry& e : index.entries) {
    HostTensor t{std::move(e.name), e.dtype, e.shape, std::vector<std::byte>(e.bytes)};
    read_exactly(f.get(), path, t.data.data(), t.data.size(),
                 fmt::format("tensor '{}'", t.name).c_str());
    out.tensors.push_back(std::move(t));
  }
  return out;
}

}  // namespace pt
