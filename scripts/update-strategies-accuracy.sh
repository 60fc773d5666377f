#!/usr/bin/env bash
# Convergence of the update strategies, the half of the "synchronous or asynchronous" table
# (docs/update-strategies.md) that pipetrain-bench-update-strategies (throughput) does not measure:
# Fashion-MNIST MLP test accuracy after 3 epochs (batch 256) for synchronous and asynchronous
# pipelines (SGD and AdamW), all-reduce and the parameter server (sync, async T = 1, 4); and the
# GPT's validation loss after 200 steps, synchronous vs asynchronous pipeline (AdamW and SGD, untied
# embeddings: async refuses ties across stages; no clipping: async has no global norm). One thread
# per device or process. Prints JSON lines.
# The second part: the one-step delay with Nesterov momentum (which, for a delay of one step, is
# the spike compensation of Kosson et al. 2021, "Pipelined Backpropagation at Scale"), sync vs
# async over three seeds, since a single run's accuracy varies by about a point between seeds
# (and the GPT with SGD + Nesterov, one seed).
# The third part (delay): the asynchronous pipeline's two delays, --async-delay uniform (2BW) and
# per-stage (the last stage computes with the latest weights), against the synchronous pipeline,
# with Nesterov momentum at a constant learning rate and with a cosine schedule, per seed
# (SEEDS="" skips them); and the GPT's validation loss after 200 steps for the same three with
# AdamW and with SGD + Nesterov (one seed). The fourth (cosine): all-reduce against the
# asynchronous parameter server (T = 1) with the cosine schedule, per seed: at a constant rate the
# last iterate's accuracy varies by about a point between runs, and the server's (whose pushes
# interleave as timing decides) even between runs of one seed.
# The fifth (defaults): what a user gets with no flag but --update async (per-microbatch delay,
# the optimizer's momentum in its look-ahead form) against the synchronous pipeline with the
# same flags, and the per-stage delay (the default before it) beside them, per seed on
# Fashion-MNIST (heavy-ball SGD, constant rate: the MLP's defaults) and once on the GPT (AdamW,
# constant rate: its defaults; --untied --clip 0 for all runs): the README's async-defaults
# table. The rows before it name their delay and momentum explicitly (2BW's exact update is
# --async-delay uniform --async-momentum plain).
#   [SEEDS="0 1 2 3 4"] scripts/update-strategies-accuracy.sh [build dir] [epochs] [all|base|nesterov|delay|cosine|defaults]
#   (all: about 60 min on 2 cores; SEEDS: the second and third parts' seeds, default 0 1 2;
#   SKIP_GPT=1: the Fashion-MNIST rows only)
set -uo pipefail
build=${1:-build}; epochs=${2:-3}; part=${3:-all}
fashion=$build/examples/pipetrain-fashion gpt=$build/examples/pipetrain-gpt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --bind-to none)
pipe=(--devices cpu:0,cpu:1 --stages 2 --microbatches 4 --threads 1)
adamw=(--optim adamw --lr 0.001)
gpt_sgd=(--optim sgd --lr 0.05)  # the better of 0.05 and 0.2 after 60 steps (sync)
async_plain=(--update async --async-momentum plain)  # the optimizer as given
async_2bw=("${async_plain[@]}" --async-delay uniform)  # PipeDream-2BW's update exactly

fashion_run() {  # mode optimizer command...
  local mode=$1 optim=$2; shift 2
  local t0=$SECONDS out acc seed=0 a prev=
  for a in "$@"; do [[ $prev == --seed ]] && seed=$a; prev=$a; done
  out=$("$@" --epochs "$epochs" --batch 256 2>&1)
  acc=$(grep -oE "test accuracy: [0-9.]+%" <<<"$out" | tail -1 | grep -oE "[0-9.]+")
  printf '{"bench": "update_strategies_accuracy", "model": "fashion_mlp", "mode": "%s", "optimizer": "%s", "seed": %s, "epochs": %s, "test_accuracy_percent": %s, "seconds": %s}\n' \
    "$mode" "$optim" "$seed" "$epochs" "${acc:-null}" $((SECONDS - t0))
  [[ -n $acc ]] || echo "$out" | tail -5 >&2
}
gpt_run() {  # mode optimizer command...
  local mode=$1 optim=$2; shift 2
  local t0=$SECONDS out loss
  out=$("$@" --steps 200 --untied --clip 0 2>&1)
  loss=$(grep -oE "final validation loss [0-9.]+" <<<"$out" | tail -1 | grep -oE "[0-9.]+$")
  printf '{"bench": "update_strategies_accuracy", "model": "gpt_d256_l4_t128", "mode": "%s", "optimizer": "%s", "steps": 200, "validation_loss_nats_per_byte": %s, "seconds": %s}\n' \
    "$mode" "$optim" "${loss:-null}" $((SECONDS - t0))
  [[ -n $loss ]] || echo "$out" | tail -5 >&2
}

if [[ $part == all || $part == base ]]; then
  fashion_run pipeline_sync sgd "$fashion" "${pipe[@]}"
  fashion_run pipeline_async sgd "$fashion" "${pipe[@]}" "${async_2bw[@]}"
  fashion_run pipeline_async_per_stage sgd "$fashion" "${pipe[@]}" "${async_plain[@]}" --async-delay per-stage
  fashion_run pipeline_sync adamw "$fashion" "${pipe[@]}" "${adamw[@]}"
  fashion_run pipeline_async adamw "$fashion" "${pipe[@]}" "${adamw[@]}" "${async_2bw[@]}"
  fashion_run pipeline_async_per_stage adamw "$fashion" "${pipe[@]}" "${adamw[@]}" "${async_plain[@]}" --async-delay per-stage
  fashion_run allreduce sgd "${mpi[@]}" -np 2 "$fashion" --dp 2 --threads 1
  fashion_run ps_sync sgd "${mpi[@]}" -np 3 "$fashion" --dp 2 --ps 1 --threads 1
  fashion_run ps_async_t1 sgd "${mpi[@]}" -np 3 "$fashion" --dp 2 --ps 1 --staleness 1 --threads 1
  fashion_run ps_async_t4 sgd "${mpi[@]}" -np 3 "$fashion" --dp 2 --ps 1 --staleness 4 --threads 1
  if [[ -x $gpt && -z ${SKIP_GPT:-} ]]; then
    gpt_run pipeline_sync adamw "$gpt" "${pipe[@]}"
    gpt_run pipeline_async adamw "$gpt" "${pipe[@]}" "${async_2bw[@]}"
    gpt_run pipeline_sync sgd "$gpt" "${pipe[@]}" "${gpt_sgd[@]}"
    gpt_run pipeline_async sgd "$gpt" "${pipe[@]}" "${gpt_sgd[@]}" "${async_2bw[@]}"
  fi
fi

if [[ $part == all || $part == nesterov ]]; then
  nesterov=(--nesterov)
  for seed in ${SEEDS:-0 1 2}; do
    fashion_run pipeline_sync sgd_nesterov "$fashion" "${pipe[@]}" "${nesterov[@]}" --seed $seed
    fashion_run pipeline_async sgd_nesterov "$fashion" "${pipe[@]}" "${nesterov[@]}" --seed $seed "${async_2bw[@]}"
    fashion_run allreduce sgd_nesterov "${mpi[@]}" -np 2 "$fashion" --dp 2 --threads 1 "${nesterov[@]}" --seed $seed
    fashion_run ps_async_t1 sgd_nesterov "${mpi[@]}" -np 3 "$fashion" --dp 2 --ps 1 --staleness 1 --threads 1 "${nesterov[@]}" --seed $seed
  done
  if [[ -x $gpt && -z ${SKIP_GPT:-} ]]; then
    gpt_run pipeline_sync sgd_nesterov "$gpt" "${pipe[@]}" "${gpt_sgd[@]}" "${nesterov[@]}"
    gpt_run pipeline_async sgd_nesterov "$gpt" "${pipe[@]}" "${gpt_sgd[@]}" "${nesterov[@]}" "${async_2bw[@]}"
  fi
fi

if [[ $part == all || $part == delay ]]; then
  for seed in ${SEEDS-0 1 2}; do
    for lr_schedule in constant cosine; do
      run=("$fashion" "${pipe[@]}" --nesterov --seed "$seed" --lr-schedule "$lr_schedule")
      fashion_run "pipeline_sync_$lr_schedule" sgd_nesterov "${run[@]}"
      fashion_run "pipeline_async_uniform_$lr_schedule" sgd_nesterov "${run[@]}" "${async_plain[@]}" --async-delay uniform
      fashion_run "pipeline_async_per_stage_$lr_schedule" sgd_nesterov "${run[@]}" "${async_plain[@]}" --async-delay per-stage
    done
  done
  if [[ -x $gpt && -z ${SKIP_GPT:-} ]]; then
    for optim in adamw sgd_nesterov; do
      args=(); [[ $optim == sgd_nesterov ]] && args=("${gpt_sgd[@]}" --nesterov)
      gpt_run pipeline_sync "$optim" "$gpt" "${pipe[@]}" "${args[@]}"
      gpt_run pipeline_async_uniform "$optim" "$gpt" "${pipe[@]}" "${args[@]}" "${async_plain[@]}" --async-delay uniform
      gpt_run pipeline_async_per_stage "$optim" "$gpt" "${pipe[@]}" "${args[@]}" "${async_plain[@]}" --async-delay per-stage
    done
  fi
fi

if [[ $part == all || $part == cosine ]]; then
  for seed in ${SEEDS:-0 1 2}; do
    run=(--dp 2 --threads 1 --nesterov --seed "$seed" --lr-schedule cosine)
    fashion_run allreduce_cosine sgd_nesterov "${mpi[@]}" -np 2 "$fashion" "${run[@]}"
    fashion_run ps_async_t1_cosine sgd_nesterov "${mpi[@]}" -np 3 "$fashion" "${run[@]}" --ps 1 --staleness 1
  done
fi

if [[ $part == all || $part == defaults ]]; then
  for seed in ${SEEDS:-0 1 2 3 4}; do
    fashion_run pipeline_sync default "$fashion" "${pipe[@]}" --seed "$seed"
    fashion_run pipeline_async default "$fashion" "${pipe[@]}" --seed "$seed" --update async
    fashion_run pipeline_async_per_stage default "$fashion" "${pipe[@]}" --seed "$seed" --update async --async-delay per-stage
  done
  if [[ -x $gpt && -z ${SKIP_GPT:-} ]]; then
    gpt_run pipeline_sync default "$gpt" "${pipe[@]}"
    gpt_run pipeline_async default "$gpt" "${pipe[@]}" --update async
    gpt_run pipeline_async_per_stage default "$gpt" "${pipe[@]}" --update async --async-delay per-stage
    gpt_run pipeline_async_plain default "$gpt" "${pipe[@]}" "${async_plain[@]}"
  fi
fi
