#!/usr/bin/env bash
# Writes the seed corpora of the fuzz targets (tests/fuzz/*_fuzz.cpp) into OUT/<target>/, small
# files made from real ones: safetensors files laid out as our writer lays them out, the manifest
# of a real checkpoint (tests/fuzz/seeds/manifest.json, from `pipetrain-fashion --steps 1
# --save`), the first records of the Fashion-MNIST IDX files (dataset-fashion-mnist), the golden
# schedules of tests/schedule/golden, a few lines of text, and the command lines of
# tests/examples/*.sh. Inputs that once found a bug are kept here too, so that they stay in
# every run. Needs python3 only.
#
#   tests/fuzz/make-seeds.sh [OUT]     (default: build-fuzz/seeds)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-fuzz/seeds}
rm -rf "$out"
mkdir -p "$out"
python3 - "$out" <<'PY'
import gzip, json, os, struct, sys, zlib

out = sys.argv[1]
def put(target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data)

# ---- safetensors: our writer's layout (no spaces, 8-byte aligned header padded with spaces)
def safetensors(tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, blob in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text.encode() + b"".join(blobs)

f32 = lambda *v: struct.pack("<%df" % len(v), *v)
put("safetensors", "mlp", safetensors([
    ("1.linear.weight", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6)),
    ("1.linear.bias", "F32", [2], f32(0.5, -0.5)),
    ("3.linear.weight", "BF16", [1, 2], b"\x80\x3f\x00\x40"),
    ("4.embedding.ids", "I32", [3], struct.pack("<3i", 1, -2, 3)),
    ("5.half", "F16", [1], b"\x00\x3c"),
], {"step": "12", "model_signature": "mlp"}))
put("safetensors", "empty_tensor", safetensors([("a", "F32", [0, 4], b""), ("b", "F32", [], f32(1))]))
put("safetensors", "no_tensors", safetensors([], {"format": "pt"}))
put("safetensors", "rank6", safetensors([("r", "I32", [1, 1, 1, 1, 1, 1], struct.pack("<i", 7))]))

# ---- checkpoint manifest: a real one, and one tensor short of it
real = open("tests/fuzz/seeds/manifest.json").read()
put("manifest", "real", real)
m = json.loads(real)
m["tensors"] = m["tensors"][:1]
m["tensors"][0]["shape"] = [2, 2]
m["tensors"][0]["bytes"] = 16
put("manifest", "small", json.dumps(m))
# Found by manifest_fuzz (fixed in manifest.cpp): a float piece index, a piece size beyond 64 bits
# (both undefined behaviour in the conversion), a shape whose byte count overflows int64
found = json.loads(json.dumps(m))
found["tensors"][0]["piece"] = 1e300
put("manifest", "found_float_piece", json.dumps(found))
found["tensors"][0]["piece"] = 0
found["tensors"][0]["shape"] = [4294967296, 4294967296, 16]
put("manifest", "found_shape_overflow", json.dumps(found))
put("manifest", "found_huge_piece_bytes",
    real.replace('"bytes": 31705080', '"bytes": 317888888888888888888888888888888805080'))

# ---- IDX: the header and first records of the real files, the count rewritten to match. The
# first byte of a fuzz input says how the rest reaches the reader (idx_fuzz.cpp): 0 as is, 1
# gzip-compressed first.
data_dir = "/usr/share/datasets/fashion-mnist"
def idx_head(name, records):
    with gzip.open(os.path.join(data_dir, name)) as f:
        magic = f.read(4)
        ndims = magic[3]
        dims = list(struct.unpack(">%dI" % ndims, f.read(4 * ndims)))
        per_record = 1
        for d in dims[1:]:
            per_record *= d
        body = f.read(records * per_record)
    dims[0] = records
    return magic + struct.pack(">%dI" % ndims, *dims) + body
if os.path.isdir(data_dir):
    labels = idx_head("t10k-labels-idx1-ubyte.gz", 20)
    images = idx_head("t10k-images-idx3-ubyte.gz", 2)
    put("idx", "labels_plain", b"\0" + labels)
    put("idx", "labels_gz_input", b"\1" + labels)
    put("idx", "images_plain", b"\0" + images)
    put("idx", "images_gzipped_file", b"\0" + gzip.compress(images, mtime=0))
else:
    print("make-seeds: %s missing (dataset-fashion-mnist): IDX seeds from a synthetic header" % data_dir)
    put("idx", "labels_plain", b"\0" + b"\0\0\x08\x01" + struct.pack(">I", 4) + bytes([1, 2, 3, 4]))

# ---- schedules: the golden files
golden = "tests/schedule/golden"
for name in sorted(os.listdir(golden)):
    put("schedule", name, open(os.path.join(golden, name), "rb").read())

# ---- pipetrain-plan's inputs: first byte even = a layer-cost file, odd = a cluster file
put("plan_inputs", "costs", b"\0# t\nsamples 4\n1.25e-4 1e-4 9e-5 802816 802816 1606144\n"
    b"3e-7 0 0 0 8 0\nsamples 16\n5e-4 4e-4 3.6e-4 3211264 3211264 1606144\n1e-6 0 0 0 32 0\n")
put("plan_inputs", "cluster", b"\1# 512 nodes of 8\ndevices 4096\nmemory_gib 80\n"
    b"devices_per_node 8\nintra_node_gb_per_s 450\nintra_node_latency_us 3\n"
    b"inter_node_gb_per_s 50\ninter_node_latency_us 10\nallreduce_gb_per_s 300\n")

# ---- text corpus: 6 parameter bytes (fraction, context, batch, max windows, first, count; see
# text_corpus_fuzz.cpp), then the text
verses = ("Ge1:1 In the beginning God created the heaven and the earth.\n"
          "Ge1:2 And the earth was without form, and void; and darkness was upon the face of the deep.\n")
put("text_corpus", "bible", bytes([26, 16, 4, 8, 0, 2]) + verses.encode())
put("text_corpus", "short", bytes([128, 1, 1, 0, 0, 1]) + b"abc")
put("text_corpus", "utf8", bytes([200, 3, 2, 1, 1, 1]) + "Grüße, 世界\n".encode())

# ---- token files: 7 parameter bytes (format, vocab - 1 as two bytes, fraction, context, batch,
# max windows; see token_file_fuzz.cpp), then the file: llm.c's header and uint16 tokens, or raw
def llmc_file(tokens, magic=20240520, version=1):
    return struct.pack("<256i", magic, version, len(tokens), *([0] * 253)) + struct.pack("<%dH" % len(tokens), *tokens)
gpt2 = [(i * 7919 + 13) % 50257 for i in range(64)]
put("token_file", "llmc", bytes([0, 0x50, 0xc4, 26, 8, 2, 4]) + llmc_file(gpt2))  # vocab 50257
put("token_file", "llmc_auto", bytes([2, 0x50, 0xc4, 26, 8, 2, 4]) + llmc_file(gpt2))
put("token_file", "llmc_default_vocab", bytes([3, 0, 0, 26, 8, 2, 4]) + llmc_file(gpt2))
put("token_file", "llmc_short", bytes([0, 0xff, 0xff, 128, 1, 1, 0]) + llmc_file([1, 2, 3]))
put("token_file", "llama3", bytes([2, 0xff, 0xff, 26, 4, 1, 1]) + llmc_file([1, 2], 20240801, 7))
put("token_file", "raw", bytes([1, 64, 0, 51, 4, 2, 2]) + struct.pack("<32H", *[i % 65 for i in range(32)]))
put("token_file", "raw_auto", bytes([2, 0x50, 0xc4, 26, 8, 2, 4]) + struct.pack("<64H", *gpt2))

# ---- command lines: every case of the examples' CLI tests (the words after the expected
# message), one word a line; shell expansions are replaced by plain values
import re, shlex
def command_lines(script):
    lines = []
    for line in open(script):
        line = line.strip()
        m = re.match(r"(expect_error|expect_refused|run_ok)\s+(.*)", line)
        if not m:
            continue
        text = re.sub(r"\$\(\(.*?\)\)|\$\(.*?\)", "8", m.group(2))
        text = re.sub(r"\$\{?(\w+)\}?", lambda v: "/tmp" if v.group(1) in ("work", "data") else "1", text)
        try:
            words = shlex.split(text, comments=True)
        except ValueError:
            continue
        if m.group(1) != "run_ok":
            words = words[1:]  # the expected message
        lines.append("\n".join(words))
    return lines
for prog, script in (("fashion_flags", "tests/examples/fashion_cli.sh"),
                     ("gpt_flags", "tests/examples/gpt_cli.sh"),
                     ("plan_flags", "tests/examples/plan_cli.sh")):
    for k, line in enumerate(command_lines(script)):
        put(prog, "case%03d" % k, line)
    put(prog, "defaults", "")
PY
echo "seeds in $out: $(find "$out" -type f | wc -l) files"
