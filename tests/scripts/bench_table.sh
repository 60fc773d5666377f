#!/usr/bin/env bash
# scripts/bench-table.py (the Figures table of docs/figures.md, from one scripts/bench-all.sh run)
# on a recorded run (bench_all_fixture.jsonl: the lines of a real run on a loaded machine, trimmed;
# the train_step, gpt, attention, memory and flight_recorder lines from later runs of those, the
# tensor_parallel lines from a run of pipetrain-bench-tensor-parallel on 2026-12-06): every
# row has its figure, the figures are the medians and spreads of the lines (not the best), a missing
# benchmark turns its rows into "not measured" and leaves the others, a failed command is named, and
# a file that is not a bench-all.sh output is refused.
#   bench_table.sh SOURCE_DIR
set -euo pipefail
src=$1
table=$src/scripts/bench-table.py
fixture=$src/tests/scripts/bench_all_fixture.jsonl
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# ---- the whole table: every row measured, the heading names the machine ----
python3 "$table" "$fixture" >"$tmp/full.md" || fail "bench-table.py exited $? on the fixture"
cat "$tmp/full.md"
rows=$(grep -c '^| ' "$tmp/full.md")
[ "$rows" -ge 20 ] || fail "$rows table lines, expected the header and at least 19 rows"
! grep -q 'not measured' "$tmp/full.md" || fail "a row is not measured on a complete run"
grep -q '^## Figures (this machine: 2 cores, ' "$tmp/full.md" || fail "no machine in the heading"

# ---- the figures are the lines' medians with [min, max], not the best ----
# Each expected cell is computed here from the fixture's own fields.
expect() {  # ROW-PREFIX TEXT
  grep -F -- "| $1" "$tmp/full.md" | grep -qF -- "$2" || fail "row '$1' lacks '$2'"
}
read -r g1 g1lo g1hi < <(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("run") == "train_step" and r.get("bench") == "sgemm" and r["threads"] == 1:
        f = lambda x: f"{x:,.0f}" if x >= 1000 else f"{x:.3g}"
        print(f(r["gflops"]), f(r["gflops_min"]), f(r["gflops_max"]))' "$fixture")
expect "sgemm 2048³" "$g1 [$g1lo, $g1hi] GFLOP/s on 1 thread"
speedup=$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("bench") == "pipeline" and r.get("schedule") == "1f1b" and r.get("microbatches") == 8:
        print("1F1B {:.2f} [{:.2f}, {:.2f}]×".format(r["speedup"], r["speedup_min"],
                                                     r["speedup_max"]))' \
  "$fixture")
expect "2 stages on 2 cores" "$speedup"
deep=$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("run") == "pipeline_deep" and r.get("bench") == "pipeline":
        print("1F1B {:.2f} [{:.2f}, {:.2f}]× ({:.2f} of ideal".format(
            r["speedup"], r["speedup_min"], r["speedup_max"], r["speedup_over_ideal"]))' \
  "$fixture")
expect "same, M = 8, a model whose two stages balance" "$deep"

# ---- torch absent: only its row says so ----
grep -v '"run": "torch"' "$fixture" >"$tmp/no-torch.jsonl"
python3 "$table" "$tmp/no-torch.jsonl" >"$tmp/no-torch.md" || fail "exited $? without torch"
[ "$(grep -c 'not measured' "$tmp/no-torch.md")" = 1 ] || fail "without torch: not one row missing"
grep 'not measured' "$tmp/no-torch.md" | grep -q '^| PyTorch' || fail "the missing row is not PyTorch's"

# ---- a failed command is named under the table ----
{
  grep -v '"run": "gpt"' "$fixture"
  echo '{"run": "gpt", "bench": "failed", "rc": 134}'
} >"$tmp/failed.jsonl"
python3 "$table" "$tmp/failed.jsonl" >"$tmp/failed.md" || fail "exited $? with a failed run"
grep -q '^| GPT (context 128.*not measured (no gpt_step line in run gpt' "$tmp/failed.md" ||
  fail "the GPT row is not marked missing"
# shellcheck disable=SC2016 # the backquotes are Markdown
grep -qF 'Failed in this run: `gpt` (exit 134).' "$tmp/failed.md" || fail "the failure is not named"

# ---- a benchmark that renamed a field: its row names the field, the others stay ----
sed '/"run": "gpt", "bench": "gpt_step_cpu"/s/"ratio_to_sgemm_cpu"/"renamed"/' "$fixture" \
  >"$tmp/renamed.jsonl"
python3 "$table" "$tmp/renamed.jsonl" >"$tmp/renamed.md" || fail "exited $? on a renamed field"
[ "$(grep -c 'not measured' "$tmp/renamed.md")" = 1 ] || fail "renamed field: not one row missing"
grep -qF "not measured (no field 'ratio_to_sgemm_cpu' in its line)" "$tmp/renamed.md" ||
  fail "the renamed field is not named"

# ---- refused: not a bench-all.sh file, and a line that is not JSON ----
grep -v '"bench": "machine"' "$fixture" >"$tmp/no-machine.jsonl"
if python3 "$table" "$tmp/no-machine.jsonl" >/dev/null 2>"$tmp/err"; then
  fail "accepted a file without the machine line"
fi
grep -q 'no machine line' "$tmp/err" || fail "unclear refusal: $(cat "$tmp/err")"
{
  cat "$fixture"
  echo '{"run": "gpt", "bench": '
} >"$tmp/broken.jsonl"
if python3 "$table" "$tmp/broken.jsonl" >/dev/null 2>"$tmp/err"; then
  fail "accepted a line that is not JSON"
fi
grep -q "broken.jsonl:$(($(wc -l <"$fixture") + 1)): not JSON" "$tmp/err" ||
  fail "the refusal does not name the line: $(cat "$tmp/err")"
echo "bench_table: ok"
