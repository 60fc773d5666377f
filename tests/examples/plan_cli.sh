#!/usr/bin/env bash
# pipetrain-plan (examples/plan), the what-if planner:
#  - writes a GPT's layer-cost file from FLOPs, plans it for 4,096 devices (512 nodes of 8) in a
#    few seconds, and the table's fields hold together (peak under the cap, samples/s = B / step,
#    bubble in [0, 100), no NaN), the estimates that chose the finalists within 10% of them (5.8% here);
#  - the MLP's costs written by pipetrain-fashion --plan auto --plan-only --costs profile
#    --write-costs give the same ranking (plan, predicted step) as that --plan auto printed;
#  - tensor parallelism: Megatron-LM's 1.7B GPT on the Selene cluster file, T x S x R = 32 with T
#    dividing the heads and the node, its TFLOP/s within 15% of the paper's 137; a T that divides
#    neither, T > 1 for a cost file, a partial node and a cluster file's half FLOP/s pair refused;
#  - every input at its stated maximum (2^20 devices, --batch 2^40, fields of 2^50 bytes): no
#    wrapped (negative) peak, refused under --mem-cap 1;
#  - malformed cost and cluster files name the file and line, a cap nothing fits names the
#    smallest that would, an unknown schedule lists the valid ones, missing inputs are named.
#
#   plan_cli.sh <pipetrain-plan> <pipetrain-fashion>
set -uo pipefail
exe=$1
fashion=$2
here=$(dirname "$0")
fails=0
source "$here/expect.sh"  # expect_refused
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/cluster.txt" <<'CLUSTER'
# 512 nodes of 8 GPUs
devices                4096
memory_gib             80
devices_per_node       8
intra_node_gb_per_s    450
intra_node_latency_us  3
inter_node_gb_per_s    50
inter_node_latency_us  10
CLUSTER
gpt=(--gpt-layers 96 --gpt-width 12288 --context 2048 --vocab 50304 --flops 300e12)

# The GPT's cost file: one table of one sample, 96 blocks + embedding + head.
out=$("$exe" "${gpt[@]}" --write-costs "$tmp/gpt.costs" 2>&1); rc=$?
layers=$(grep -cE '^[0-9.e+-]+( [0-9.e+-]+){5}$' "$tmp/gpt.costs" 2>/dev/null)
if [ $rc -ne 0 ] || [ "$layers" != 98 ] || ! grep -q '^samples 1$' "$tmp/gpt.costs"; then
  echo "FAIL: --write-costs (rc=$rc, $layers layer lines):"; echo "$out"; fails=$((fails+1))
else
  echo "ok: $out"
fi

# 4,096 devices from that file.
out=$("$exe" --costs "$tmp/gpt.costs" --cluster "$tmp/cluster.txt" --batch 8192 --top 5 2>&1); rc=$?
rows=$(grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+% ' <<<"$out")
bad=$(awk -v B=8192 '{ step = $2 / 1e3; bubble = $3 + 0; peak = $4; sps = $5;
        if (!(step > 0) || bubble < 0 || bubble >= 100 || !(peak > 0) || peak > 80 ||
            sps < 0.999 * B / step || sps > 1.001 * B / step || $9 * $11 * $13 != 4096 || $9 != 1 || $6 != "-" ||
            ($8 != "stages" && $8 != "replicas")) print }' <<<"$rows")
if [ $rc -ne 0 ] || [ "$(wc -l <<<"$rows")" -ne 5 ] || [ -n "$bad" ] || grep -qi nan <<<"$out" ||
   ! grep -qE '^searched [0-9]+ plans .* simulated the best 8 exactly, in [0-9.]+ s' <<<"$out" ||
   ! awk '/^the 8 simulated plans. estimates were within/ { ok = ($8 + 0 < 10) } END { exit !ok }' <<<"$out"; then
  echo "FAIL: 4096 devices (rc=$rc, bad rows: '$bad'):"; echo "$out"; fails=$((fails+1))
else
  echo "ok: 4096 devices: $(grep '^searched' <<<"$out"); best: $(head -1 <<<"$rows")"
fi

# The MLP: the costs --plan auto profiled and planned with, and its ranking, against ours.
auto=$("$fashion" --devices cpu:0,cpu:1 --threads 1 --plan auto --plan-only --costs profile \
       --batch 64 --plan-top 1000 --write-costs "$tmp/mlp.costs" 2>&1); rc1=$?
# --plan auto's links: 30 GB/s between stages; its all-reduce, measured, as the cost file says.
{
  printf 'devices 2\nmemory_gib 1024\ndevices_per_node 2\nintra_node_gb_per_s 30\n'
  printf 'intra_node_latency_us 0\ninter_node_gb_per_s 30\ninter_node_latency_us 0\n'
  sed -n 's/^# \(allreduce_[a-z_]* [0-9.e+-]*\)$/\1/p' "$tmp/mlp.costs"
} >"$tmp/two.txt"
ours=$("$exe" --costs "$tmp/mlp.costs" --cluster "$tmp/two.txt" --batch 64 --mem-cap 0 \
       --optimizer-slots 1 --max-microbatches 32 --simulate 0 --top 1000 2>&1); rc2=$?
ranking() {  # step (ms), S x R, M, schedule, recompute of each unsharded row
  # --plan auto also searches full sharding (its last column, shard): pipetrain-plan, by
  # default, does not; its rows are compared with --plan auto's unsharded ones.
  grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+% ' |
    awk '$NF != "full" { if ($NF == "none") NF--; print $2, $(NF-5) $(NF-4) $(NF-3), $(NF-2), $(NF-1), $NF }'
}
a=$(ranking <<<"$auto"); b=$(ranking <<<"$ours")
# The same plans in the same order, the steps equal to the 0.01 ms --plan auto prints.
differ=$(paste -d' ' <(echo "$a") <(echo "$b") | awk '{ d = $1 - $6; if (d < 0) d = -d;
           if (NF != 10 || d > 0.0051 || $2 != $7 || $3 != $8 || $4 != $9 || $5 != $10) print }')
if [ $rc1 -ne 0 ] || [ $rc2 -ne 0 ] || [ -z "$a" ] || [ "$(wc -l <<<"$a")" != "$(wc -l <<<"$b")" ] ||
   [ -n "$differ" ]; then
  echo "FAIL: the MLP's ranking differs (rc $rc1, $rc2):"; diff <(echo "$a") <(echo "$b") | head -20
  echo "$auto" | head -5; echo "$ours" | head -5; fails=$((fails+1))
else
  echo "ok: the MLP's costs from --plan auto --write-costs: the same $(wc -l <<<"$a") plans in the same order; best $(head -1 <<<"$a")"
fi

# Every input at its stated maximum (issue 37): 2^50 bytes per field, a table of 1 sample scaled
# to 2^40 / 2^20 samples per micro-batch, 2^20 devices. Sizes saturate instead of wrapping: a
# wrapped peak was -8,547,991,552 GiB per device and fit --mem-cap 1.
{ echo 'samples 1'; for _ in 1 2; do echo '1e6 1e6 1e6 1125899906842624 1125899906842624 1125899906842624'; done; } >"$tmp/max.costs"
printf 'devices 1048576\nmemory_gib 1048576\ndevices_per_node 1048576\nintra_node_gb_per_s 1e6\n' >"$tmp/max.txt"
printf 'intra_node_latency_us 1e6\ninter_node_gb_per_s 1e6\ninter_node_latency_us 1e6\n' >>"$tmp/max.txt"
max=(--costs "$tmp/max.costs" --cluster "$tmp/max.txt" --batch 1099511627776 --max-microbatches 65536 --simulate 1)
expect_refused "no plan of the" "${max[@]}" --mem-cap 1
out=$("$exe" "${max[@]}" --mem-cap 0 --top 5 2>&1); rc=$?
rows=$(grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+% ' <<<"$out")
if [ $rc -ne 0 ] || [ -z "$rows" ] || awk '{ if (!($4 > 1e6)) bad = 1 } END { exit !bad }' <<<"$rows"; then
  echo "FAIL: at the maxima without a cap (rc=$rc), every peak must be a size beyond 1e6 GiB:"; echo "$out"; fails=$((fails+1))
else
  echo "ok: at the maxima: refused under --mem-cap 1; without a cap, peaks $(awk '{ printf "%s ", $4 }' <<<"$rows")GiB"
fi

# Tensor parallelism: Megatron-LM's 1.7B GPT (Narayanan et al. 2021, Table 1: 137 TFLOP/s per
# GPU on 32 A100s) on the Selene cluster file; T x S x R = 32, T divides 24 heads and 8 per node;
# the model TFLOP/s column is the paper's count / step / GPUs (scripts/megatron-table.sh: all rows).
selene=$here/../../examples/plan/clusters/selene-a100.txt
row=(--gpt-layers 24 --gpt-width 2304 --heads 24 --context 2048 --vocab 51200 --cluster "$selene" --devices 32 --batch 512)
out=$("$exe" "${row[@]}" --recompute every:1 --schedules 1f1b,interleaved:2,interleaved:3,interleaved:4 --top 3 2>&1); rc=$?
rows=$(grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+% ' <<<"$out")
bad=$(awk '{ if ($9 * $11 * $13 != 32 || 24 % $9 != 0 || 8 % $9 != 0 || $6 < 137 * 0.85 || $6 > 137 * 1.15 || $NF != "every:1") print }' <<<"$rows")
if [ $rc -ne 0 ] || [ "$(wc -l <<<"$rows")" -ne 3 ] || [ -n "$bad" ] || ! grep -q '^searched .*(T in 1,2,4,8, ' <<<"$out"; then
  echo "FAIL: Megatron's 1.7B GPT (rc=$rc, bad rows: '$bad'):"; echo "$out"; fails=$((fails+1))
else
  echo "ok: Megatron's 1.7B GPT on 32 A100s: $(head -1 <<<"$rows")"
fi
expect_refused "--tensor-parallel 16: does not divide the 24 attention heads" "${row[@]}" --tensor-parallel 16
expect_refused "--tensor-parallel 16: does not divide the 8 devices per node" --gpt-layers 24 --gpt-width 4096 --heads 32 --context 2048 --vocab 51200 --cluster "$selene" --devices 32 --batch 512 --tensor-parallel 16
expect_refused "--tensor-parallel: 'x' is not a degree" "${row[@]}" --tensor-parallel 2,x
expect_refused "--tensor-parallel > 1 and --sequence-parallel need to know how the layers shard" --costs "$tmp/gpt.costs" --cluster "$tmp/cluster.txt" --batch 64 --tensor-parallel 2
expect_refused "--devices 36: cluster file" "${row[@]:0:12}" --devices 36 --batch 512
expect_refused "--flops is missing and cluster file $tmp/cluster.txt has no peak_tflops" --gpt-layers 4 --gpt-width 256 --context 64 --vocab 256 --cluster "$tmp/cluster.txt" --batch 64
printf 'peak_tflops 312\n' >>"$tmp/bad3.txt"; cat "$tmp/cluster.txt" >>"$tmp/bad3.txt"
expect_refused "bad3.txt:1: peak_tflops without achieved_fraction" --costs "$tmp/gpt.costs" --cluster "$tmp/bad3.txt" --batch 64

# Refusals.
exe=$fashion expect_refused "--write-costs writes the layer costs --plan auto plans with" --write-costs "$tmp/y.costs" --steps 1
printf 'samples 1\n1e-3 1e-3 1e-3 16 16 64\n1e-3 nan 1e-3 16 16 64\n' >"$tmp/bad.costs"
expect_refused "bad.costs:3: backward_input_s is 'nan'" --costs "$tmp/bad.costs" --cluster "$tmp/cluster.txt" --batch 64
printf 'epilogue 1e-9\nsamples 1\n1e-3 1e-3 1e-3 16 16 64\n' >"$tmp/bad2.costs"
expect_refused "bad2.costs:1: expected 'epilogue SERIAL UPDATE'" --costs "$tmp/bad2.costs" --cluster "$tmp/cluster.txt" --batch 64
sed 's/^devices_per_node.*/devices_per_node eight/' "$tmp/cluster.txt" >"$tmp/bad.txt"
expect_refused "bad.txt:4: devices_per_node is 'eight'" --costs "$tmp/gpt.costs" --cluster "$tmp/bad.txt" --batch 64
expect_refused "raise --mem-cap to at least" --costs "$tmp/gpt.costs" --cluster "$tmp/cluster.txt" --batch 8192 --mem-cap 1000
expect_refused "unknown schedule 'zb-h3': valid are gpipe, 1f1b" --costs "$tmp/gpt.costs" --cluster "$tmp/cluster.txt" --batch 64 --schedules 1f1b,zb-h3
expect_refused "--cluster FILE is missing" --costs "$tmp/gpt.costs" --batch 64
expect_refused "no layer costs" --cluster "$tmp/cluster.txt" --batch 64
expect_refused "two sources of layer costs" "${gpt[@]}" --costs "$tmp/gpt.costs" --cluster "$tmp/cluster.txt" --batch 64
expect_refused "--vocab is missing" --gpt-layers 4 --gpt-width 256 --context 64 --flops 1e12 --write-costs "$tmp/x.costs"
expect_refused "--mem-cap -5 must be 0 to 2^30 MiB" --costs "$tmp/gpt.costs" --cluster "$tmp/cluster.txt" --batch 64 --mem-cap -5
expect_refused "--batch 0 must be" --costs "$tmp/gpt.costs" --cluster "$tmp/cluster.txt"
# A value given as 0 is refused as such, not reported missing; a number that is not one states
# the flag's range; an empty list is refused; a cap from the cluster file is not called a flag.
expect_refused "--flops 0 must be a finite number > 0 (achieved FLOP/s per device" \
  --gpt-layers 4 --gpt-width 256 --context 64 --vocab 256 --flops 0 --write-costs "$tmp/x.costs"
expect_refused "--gpt-layers 0 must be a finite number > 0" \
  --gpt-layers 0 --gpt-width 256 --context 64 --vocab 256 --flops 1e12 --write-costs "$tmp/x.costs"
expect_refused "--top: x must be an integer between 1 and 10000" --costs "$tmp/gpt.costs" --cluster "$tmp/cluster.txt" --batch 64 --top x
expect_refused "--schedules: the value is empty" --costs "$tmp/gpt.costs" --cluster "$tmp/cluster.txt" --batch 64 --schedules ""
expect_refused "--cluster: the value is empty" --costs "$tmp/gpt.costs" --cluster "" --batch 64
sed 's/^memory_gib.*/memory_gib 1/' "$tmp/cluster.txt" >"$tmp/small.txt"
expect_refused "the memory per device of cluster file $tmp/small.txt (memory_gib; no --mem-cap given), 1024.0 MiB: no plan" \
  --costs "$tmp/gpt.costs" --cluster "$tmp/small.txt" --batch 8192
out=$("$exe" --costs "$tmp/gpt.costs" --cluster "$tmp/small.txt" --batch 8192 2>&1)
grep -q "raise --mem-cap\|^error: --mem-cap" <<<"$out" && { echo "FAIL: a cap nobody gave is called --mem-cap: $out"; fails=$((fails+1)); }
expect_help "Model Parallelism Schedule"

[ $fails -eq 0 ] && echo "all plan_cli checks passed"
exit $((fails > 0))
