#!/usr/bin/env bash
# scripts/check-includes.sh fails where it must: an engine folder that includes one above it
# (ARCHITECTURE.md's layers), a loose source file at the top of engine/, an unknown engine
# folder; and passes a tree that keeps the rules. Runs the script on small git trees of its own.
set -euo pipefail
script=$(cd "$(dirname "$0")/../.." && pwd)/scripts/check-includes.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/check-includes.XXXXXX")
trap 'rm -rf "$work"' EXIT

tree() {  # tree NAME: a fresh git tree with the script and a lawful engine/
  local t=$work/$1
  mkdir -p "$t/scripts" "$t/engine/core" "$t/engine/train" "$t/engine/setup"
  cp "$script" "$t/scripts/"
  printf '#pragma once\n' >"$t/engine/core/tensor.h"
  printf '#pragma once\n#include "engine/core/tensor.h"\n' >"$t/engine/train/trainer.h"
  printf '#pragma once\n#include "engine/train/trainer.h"\n' >"$t/engine/setup/run.h"
  git -C "$t" init -q
  echo "$t"
}
commit() { git -C "$1" add -A && git -C "$1" -c user.name=t -c user.email=t@t commit -qm t; }
expect() {  # expect RC TREE TEXT
  local rc=0 out
  out=$(bash "$2/scripts/check-includes.sh" 2>&1) || rc=$?
  [[ $rc == "$1" ]] || { echo "$out"; echo "FAIL: exit $rc, wanted $1 ($2)"; exit 1; }
  [[ -z $3 ]] || grep -qF -- "$3" <<<"$out" || { echo "$out"; echo "FAIL: no '$3'"; exit 1; }
}

t=$(tree good); commit "$t"
expect 0 "$t" "the include rules hold"

t=$(tree upward)
printf '#pragma once\n#include "engine/setup/run.h"\n' >"$t/engine/train/step.h"
commit "$t"
expect 1 "$t" "engine/train/ may not include engine/setup/, a layer above it"

t=$(tree loose)
printf 'int x;\n' >"$t/engine/loose.cpp"
commit "$t"
expect 1 "$t" "engine/loose.cpp: a loose source file at the top of engine/"

t=$(tree unknown)
mkdir -p "$t/engine/misc"
printf '#pragma once\n#include "engine/core/tensor.h"\n' >"$t/engine/misc/thing.h"
commit "$t"
expect 1 "$t" "engine/misc/ is not in engine_layers"
echo "check_includes: ok"
