#!/usr/bin/env bash
# pipetrain-ckpt on real checkpoints written by pipetrain-fashion: inspect and verify a whole one
# (also through latest:DIR), merge it into one safetensors file that an independent reader (below,
# python3 standard library only) parses and whose values match the piece's bytes exactly, then
# damage copies of it (a flipped byte, a truncated piece, a deleted piece, no manifest, a
# malformed manifest) and check that each is named. With --mpi, the same on a checkpoint that two
# processes wrote (two pieces) instead. Exit 77 (skip) without Fashion-MNIST (or mpirun).
#
# Usage: ckpt_cli.sh PIPETRAIN-FASHION PIPETRAIN-CKPT [--mpi] [DATA]
set -uo pipefail
fashion=$1
ckpt=$2
mode=
if [ "${3:-}" = --mpi ]; then mode=--mpi; shift; fi
data=${3:-/usr/share/datasets/fashion-mnist}
[ -f "$data/train-images-idx3-ubyte.gz" ] || [ -f "$data/train-images-idx3-ubyte" ] ||
  { echo "no Fashion-MNIST in $data: skipped"; exit 77; }
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
pass() { echo "ok: $*"; }
source "$(dirname "$0")/expect.sh"  # expect_help

# run ARGS...: pipetrain-ckpt's stdout in $out, stderr in $err, exit code in $rc.
run() {
  out=$("$ckpt" "$@" 2>"$work/stderr"); rc=$?
  err=$(cat "$work/stderr")
}
# expect RC WANT ARGS...: exit code RC and WANT (a fixed string) in stdout or stderr.
expect() {
  local want_rc=$1 want=$2; shift 2
  run "$@"
  if [ "$rc" -ne "$want_rc" ] || ! grep -qF -- "$want" <<<"$out$err"; then
    fail "pipetrain-ckpt $* gave rc=$rc, expected $want_rc with '$want'. Output:"
    echo "$out"; echo "$err"
  else
    pass "pipetrain-ckpt $* -> rc=$rc, $(grep -F -- "$want" <<<"$out$err" | head -1)"
  fi
}
# expect_bad_input WANT ARGS...: exit 2 and exactly one line on stderr, "error: ..." with WANT.
expect_bad_input() {
  local want=$1; shift
  run "$@"
  if [ "$rc" -ne 2 ] || [ "$(wc -l <<<"$err")" -ne 1 ] || [[ $err != "error: "* ]] ||
      ! grep -qF -- "$want" <<<"$err"; then
    fail "pipetrain-ckpt $* gave rc=$rc, expected 2 and one 'error: ...$want...' line. stderr:"
    echo "$err"
  else
    pass "pipetrain-ckpt $* -> rc=2, $err"
  fi
}

# ---- helpers: an independent safetensors reader, a byte flipper ------------------------------
# read_merged.py MERGED CHECKPOINT WITH_OPTIMIZER: parses MERGED as the safetensors format says
# (8-byte little-endian header length, JSON header, data offsets tiling the buffer), and compares
# it with the checkpoint's piece read through the manifest's offsets: the same tensor names, all
# F32, every tensor's bytes identical, 9.linear.bias as floats, and the metadata copied.
cat >"$work/read_merged.py" <<'EOF'
import json, math, os, struct, sys
merged, checkpoint, with_optimizer = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
blob = open(merged, "rb").read()
(n,) = struct.unpack("<Q", blob[:8])
header = json.loads(blob[8:8 + n].decode("utf-8"))
buffer = blob[8 + n:]
meta = header.pop("__metadata__", {})
spans = sorted((e["data_offsets"][0], e["data_offsets"][1], name) for name, e in header.items())
at = 0
for begin, end, name in spans:  # the tensors tile the buffer: no gap, no overlap, no tail
    assert begin == at, f"{name} starts at {begin}, the previous tensor ended at {at}"
    at = end
assert at == len(buffer), f"the tensors end at {at} but the buffer has {len(buffer)} bytes"

manifest = json.load(open(os.path.join(checkpoint, "manifest.json")))
def from_piece(t):
    with open(os.path.join(checkpoint, manifest["pieces"][t["piece"]]["file"]), "rb") as f:
        f.seek(t["offset"])
        return f.read(t["bytes"])
want = [t for t in manifest["tensors"] if with_optimizer or not t["name"].startswith("optimizer.")]
assert sorted(header) == sorted(t["name"] for t in want), sorted(header)
for t in want:
    e = header[t["name"]]
    assert e["dtype"] == "F32", (t["name"], e["dtype"])
    assert e["shape"] == t["shape"], (t["name"], e["shape"], t["shape"])
    begin, end = e["data_offsets"]
    assert end - begin == 4 * math.prod(t["shape"]), t["name"]
    assert buffer[begin:end] == from_piece(t), f"{t['name']}: bytes differ from the piece"
bias = next(t for t in manifest["tensors"] if t["name"] == "9.linear.bias")
begin, end = header["9.linear.bias"]["data_offsets"]
got = struct.unpack("<10f", buffer[begin:end])
expected = struct.unpack("<10f", from_piece(bias))
assert got == expected and any(v != 0 for v in got), (got, expected)
for key in ("step", "seed", "epoch", "model_signature"):
    assert meta.get(key) == manifest["metadata"][key], (key, meta.get(key))
assert all(isinstance(v, str) for v in meta.values())
names = sorted(header)
print(f"{len(names)} tensors ({sum(x.startswith('optimizer.') for x in names)} optimizer), "
      f"9.linear.bias = {got[0]:.6g}, ... ({len(got)} floats) as in the piece, step {meta['step']}")
EOF
# check_merged CHECKPOINT OUT WITH_OPTIMIZER(0|1) [FLAGS]: merge, then read OUT back and compare.
check_merged() {
  local checkpoint=$1 merged=$2 with=$3; shift 3
  run merge "$checkpoint" "$merged" "$@"
  local read
  if [ "$rc" -eq 0 ] && read=$(python3 "$work/read_merged.py" "$merged" "$checkpoint" "$with" 2>&1); then
    pass "merge $checkpoint $merged $*: $read"
  else
    fail "merge $checkpoint $merged $* (rc=$rc) or its reading back:"; echo "$out"; echo "$err"; echo "$read"
  fi
}
# flip_byte.py CHECKPOINT TENSOR: flips one bit of a byte in the middle of TENSOR's bytes in its
# piece, at the offset the manifest gives.
cat >"$work/flip_byte.py" <<'EOF'
import json, os, sys
m = json.load(open(os.path.join(sys.argv[1], "manifest.json")))
t = next(t for t in m["tensors"] if t["name"] == sys.argv[2])
with open(os.path.join(sys.argv[1], m["pieces"][t["piece"]]["file"]), "r+b") as f:
    f.seek(t["offset"] + t["bytes"] // 2)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0x40]))
EOF

# ---- --mpi: a checkpoint of two pieces, one per process --------------------------------------
if [ "$mode" = --mpi ]; then
  command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
  if ! timeout 120 mpirun -np 2 "$fashion" --data "$data" --steps 3 --batch 64 --stages 2 \
      --save "$work/mp" >"$work/train.log" 2>&1; then
    echo "FAIL: mpirun -np 2 pipetrain-fashion could not write the checkpoint:"; cat "$work/train.log"; exit 1
  fi
  run inspect "$work/mp"
  if [ "$rc" -eq 0 ] && grep -qE '^ +part-00000\.safetensors +[0-9]+ +0$' <<<"$out" &&
      grep -qE '^ +part-00001\.safetensors +[0-9]+ +1$' <<<"$out" &&
      grep -qE '^ +1\.linear\.weight .* part-00000\.safetensors$' <<<"$out" &&
      grep -qE '^ +9\.linear\.bias .* part-00001\.safetensors$' <<<"$out" &&
      grep -qE '^ +processes +2$' <<<"$out"; then
    pass "inspect: 2 pieces (world ranks 0 and 1), stage 0's tensors in the first, stage 1's in the second"
  else
    fail "inspect of a 2-process checkpoint (rc=$rc):"; echo "$out"; echo "$err"
  fi
  expect 0 "in 2 pieces, " verify "$work/mp"
  check_merged "$work/mp" "$work/mp_weights.safetensors" 0
  check_merged "$work/mp" "$work/mp_all.safetensors" 1 --with-optimizer
  cp -r "$work/mp" "$work/mp_flipped"
  python3 "$work/flip_byte.py" "$work/mp_flipped" 9.linear.bias
  expect 1 "piece part-00001.safetensors: tensor '9.linear.bias' is corrupt" verify "$work/mp_flipped"
  ! grep -qF "part-00000" <<<"$out" || fail "verify blames part-00000 for a byte flipped in part-00001"
  cp -r "$work/mp" "$work/mp_deleted"
  rm "$work/mp_deleted/part-00000.safetensors"
  expect 1 "piece part-00000.safetensors is missing" verify "$work/mp_deleted"
  ! grep -qF "part-00001" <<<"$out" || fail "verify blames part-00001 when only part-00000 is gone"
  echo "$fails failure(s)"
  [ "$fails" -eq 0 ]
  exit
fi

# ---- two real checkpoints: one folder, and numbered ones for latest:DIR --------------------------
if ! "$fashion" --data "$data" --steps 3 --batch 64 --stages 2 --save "$work/ck" >"$work/train.log" 2>&1 ||
    ! "$fashion" --data "$data" --steps 3 --batch 64 --stages 2 --save-every 1 --save "$work/runs" \
      >>"$work/train.log" 2>&1; then
  echo "FAIL: pipetrain-fashion could not write the checkpoints:"; cat "$work/train.log"; exit 1
fi
manifest=$work/ck/manifest.json
piece=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pieces"][0]["file"])' "$manifest")
tensors=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["tensors"]))' "$manifest")
[ -f "$work/ck/$piece" ] && [ "$tensors" -gt 10 ] || { echo "FAIL: unexpected checkpoint:"; ls -la "$work/ck"; exit 1; }

# ---- inspect ----------------------------------------------------------------------------------
run inspect "$work/ck"
if [ "$rc" -eq 0 ] && grep -qE '^ +step +3$' <<<"$out" && grep -qE '^ +stages +2$' <<<"$out" &&
    grep -qE '^ +1\.linear\.weight +F32 +\(1024, 784\) +3211264 +part-00000\.safetensors$' <<<"$out" &&
    grep -qE '^ +kind +sgd$' <<<"$out" && grep -qE '^ +model_signature +11 lines' <<<"$out" &&
    ! grep -qF '2 relu (1024)' <<<"$out" && grep -qE "^total: $tensors tensors " <<<"$out"; then
  pass "inspect: step 3, stages 2, 1.linear.weight, sgd, the signature shortened, $tensors tensors"
else
  fail "inspect (rc=$rc) lacks step 3 / stages 2 / 1.linear.weight / ... or prints the whole signature:"
  echo "$out"; echo "$err"
fi
run inspect --json "$work/ck"
printf '%s\n' "$out" >"$work/inspect.json"
if [ "$rc" -eq 0 ] && python3 - "$manifest" "$work/inspect.json" <<'EOF'; then
import json, sys
j = json.load(open(sys.argv[2]))
m = json.load(open(sys.argv[1]))
assert j["training"]["step"] == "3" and j["layout"]["stages"] == "2", j["training"]
assert [t["name"] for t in j["tensors"]] == [t["name"] for t in m["tensors"]]
assert j["totals"]["tensors"] == len(m["tensors"])
assert "relu" not in j["settings"]["model_signature"]
EOF
  pass "inspect --json: one JSON object with step 3, stages 2 and the manifest's tensors"
else
  fail "inspect --json (rc=$rc):"; echo "$out" | head -40; echo "$err"
fi
run inspect "latest:$work/runs"
if [ "$rc" -eq 0 ] && grep -qF "step-00000003" <<<"$out" && grep -qE '^ +step +3$' <<<"$out"; then
  pass "inspect latest:DIR is step-00000003"
else
  fail "inspect latest:DIR (rc=$rc):"; echo "$out" | head -20; echo "$err"
fi

# ---- verify on whole checkpoints ----------------------------------------------------------------
expect 0 "ok: $tensors tensors in 1 piece, " verify "$work/ck"
expect 0 "all checksums match" verify "latest:$work/runs"

# ---- merge, read back by the independent reader ----------------------------------------------
check_merged "$work/ck" "$work/weights.safetensors" 0
check_merged "$work/ck" "$work/all.safetensors" 1 --with-optimizer
# an existing regular file is replaced
check_merged "$work/ck" "$work/weights.safetensors" 0
if python3 -c 'import json,struct,sys; b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]
sys.exit(any(k.startswith("optimizer.") for k in json.loads(b[8:8+n])))' "$work/weights.safetensors"; then
  pass "no optimizer.* tensor without --with-optimizer"
else
  fail "optimizer.* tensors in the merge without --with-optimizer"
fi
expect_bad_input "character device" merge "$work/ck" /dev/null
[ -c /dev/null ] || fail "/dev/null is no longer a character device"
mkdir "$work/a_folder"
expect_bad_input "a folder, not a regular file" merge "$work/ck" "$work/a_folder"
# Missing folders above OUT are created (as every output path's); a file in their way, a
# dangling link and empty arguments are refused; latest: with no folder says so.
check_merged "$work/ck" "$work/new/sub/out.safetensors" 0
echo x >"$work/in_the_way"
expect_bad_input "$work/in_the_way is a regular file, not a folder" merge "$work/ck" "$work/in_the_way/out.safetensors"
ln -s "$work/gone/x.safetensors" "$work/dangling"
expect_bad_input "is a symbolic link to $work/gone/x.safetensors, which does not exist" merge "$work/ck" "$work/dangling"
[ -L "$work/dangling" ] || fail "merge replaced a dangling link"
expect 2 "OUT: the value is empty" merge "$work/ck" ""
expect 2 "CKPT: the value is empty" inspect ""
expect_bad_input "CKPT latest: names no folder: give latest:DIR" verify latest:
exe=$ckpt expect_help "Checkpoints" merge
cp -r "$work/ck" "$work/ck_copy"
expect_bad_input "inside the checkpoint" merge "$work/ck_copy" "$work/ck_copy/$piece"
expect 0 "all checksums match" verify "$work/ck_copy"
expect_bad_input "inside the checkpoint" merge "$work/ck_copy" "$work/ck_copy/merged.safetensors"
[ ! -e "$work/ck_copy/merged.safetensors" ] || fail "merge wrote into the checkpoint folder"

# ---- damaged checkpoints: each problem named -------------------------------------------------
# One byte flipped in the middle of 5.linear.weight (its offset from the manifest).
cp -r "$work/ck" "$work/flipped"
python3 "$work/flip_byte.py" "$work/flipped" 5.linear.weight
expect 1 "piece $piece: tensor '5.linear.weight' is corrupt" verify "$work/flipped"
if grep -qF "damaged: 1 problem in" <<<"$out" && [ "$(grep -c "tensor '" <<<"$out")" -eq 1 ]; then
  pass "verify names only the damaged tensor"
else
  fail "verify of one flipped byte should report exactly one tensor:"; echo "$out"
fi
expect_bad_input "tensor '5.linear.weight' is corrupt" merge "$work/flipped" "$work/from_flipped.safetensors"
[ ! -e "$work/from_flipped.safetensors" ] || fail "merge of a corrupt checkpoint left its output behind"

cp -r "$work/ck" "$work/truncated"
truncate -s -1000 "$work/truncated/$piece"
expect 1 "piece $piece has " verify "$work/truncated"

cp -r "$work/ck" "$work/deleted"
rm "$work/deleted/$piece"
expect 1 "piece $piece is missing" verify "$work/deleted"

# ---- bad input: exit 2, one error line ---------------------------------------------------------
mkdir "$work/no_manifest"
cp "$work/ck/$piece" "$work/no_manifest/"
for cmd in inspect verify; do
  expect_bad_input "has no manifest.json" $cmd "$work/no_manifest"
done
expect_bad_input "has no manifest.json" merge "$work/no_manifest" "$work/x.safetensors"
expect_bad_input "does not exist" verify "$work/missing"
expect_bad_input "is a file, not a checkpoint folder" inspect "$work/weights.safetensors"
cp -r "$work/ck" "$work/bad_manifest"
head -c 200 "$work/ck/manifest.json" >"$work/bad_manifest/manifest.json"
expect_bad_input "manifest.json is not valid JSON" verify "$work/bad_manifest"
expect_bad_input "holds no complete numbered checkpoint" inspect "latest:$work/a_folder"
run bogus "$work/ck"
[ "$rc" -eq 2 ] && pass "an unknown subcommand -> rc=2" || { fail "pipetrain-ckpt bogus gave rc=$rc, expected 2"; echo "$err"; }

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
