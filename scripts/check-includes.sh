#!/usr/bin/env bash
# Static check: the include rules that keep the layers of the tree apart. Names each violating
# line and exits 1 if there is any. Needs only bash, git and grep.
#
#   schedule/        includes only schedule/ and the C++ standard library (pure code)
#   layers/          includes only layers/ and engine/core/ (third-party <...> headers allowed)
#   kernels/         includes only kernels/ and engine/core/ (third-party <...> headers allowed)
#   engine/core/     includes only engine/core/ (third-party <...> headers allowed)
#   engine/A/        includes engine/B/ only where B is at or below A in engine_layers (below):
#                    the layers of ARCHITECTURE.md, bottom up; engine/ has no loose source file
#   engine/ outside engine/cuda/
#                    includes no CUDA header (<cuda*.h>, <cublas*>, <cudnn*>, <nccl*>) and no
#                    kernels/cpu/ header: the engine reaches devices through engine/core/backend.h
#
# Known exceptions (below) are violations someone is removing: they are reported and counted like
# any other unless --allow-known is given; --list-exceptions prints them. An exception whose line
# no longer violates is reported as stale, so the list only shrinks.
#
# Usage: scripts/check-includes.sh [--allow-known] [--list-exceptions]
set -euo pipefail
cd "$(dirname "$0")/.."

# "file:included path    why it is still there", one a line.
known_exceptions=(
)

# The folders of engine/, bottom up (ARCHITECTURE.md, "The layers"): a folder may include its
# own headers and those of the folders before it, never one after it.
engine_layers=(core io trace comm data report process cuda devices optim train checkpoint parallel
  update pipeline replicas partition plan loop inference setup)
declare -A engine_level=()
for i in "${!engine_layers[@]}"; do engine_level[${engine_layers[$i]}]=$i; done

allow_known=0
for arg in "$@"; do
  case $arg in
    --allow-known) allow_known=1 ;;
    --list-exceptions)
      echo "known exceptions to the include rules (file:included path    reason):"
      if ((${#known_exceptions[@]})); then printf '  %s\n' "${known_exceptions[@]}"; else echo "  none"; fi
      exit 0 ;;
    -h | --help)
      echo "usage: $0 [--allow-known] [--list-exceptions]"
      exit 0 ;;
    *)
      echo "check-includes: unknown argument '$arg' (use --allow-known, --list-exceptions)" >&2
      exit 2 ;;
  esac
done

# CI runs as root in a fresh clone it may not own: let git read this one tree anyway.
git() { command git -c safe.directory="$PWD" "$@"; }

declare -A exception_reason=() exception_hit=()
for e in "${known_exceptions[@]}"; do
  key=${e%%[[:space:]]*}
  reason=${e#"$key"}
  exception_reason[$key]=${reason#"${reason%%[![:space:]]*}"}
done

# The path a quoted include names, repo-relative: the including file's folder first (as the
# compiler looks), else the include path (the repo root, or a generated header).
resolve() {  # file, included path
  local dir=${1%/*} path=$2
  [[ $1 == */* ]] || dir=.
  local candidate="$dir/$path"
  if [[ -e $candidate ]]; then
    local -a parts=() out=()
    IFS=/ read -ra parts <<<"$candidate"
    for p in "${parts[@]}"; do
      case $p in
        . | "") ;;
        ..) ((${#out[@]})) && unset 'out[${#out[@]}-1]' ;;
        *) out+=("$p") ;;
      esac
    done
    local IFS=/
    echo "${out[*]}"
  else
    echo "$path"
  fi
}

is_std_header() { [[ $1 =~ ^[a-z_0-9]+$ ]]; }  # <vector>, <cstdint>: no folder, no extension
is_project_path() { [[ $1 =~ ^(engine|layers|kernels|schedule|bench|examples|tests)/ ]]; }
is_cuda_header() { [[ $1 =~ ^(cuda[^/]*\.h|cublas|cudnn|nccl) ]]; }

violations=0 known=0
report() {  # file, line, text, rule
  local key="$1:$5"
  if [[ -n ${exception_reason[$key]:-} ]]; then
    exception_hit[$key]=1
    echo "$1:$2: $3"
    echo "    $4 [known exception: ${exception_reason[$key]}]"
    known=$((known + 1))
    ((allow_known)) && return 0
  else
    echo "$1:$2: $3"
    echo "    $4"
  fi
  violations=$((violations + 1))
}

include_line='^[[:space:]]*#[[:space:]]*include[[:space:]]*([<"])([^>"]+)[>"]'
while IFS= read -r hit; do
  file=${hit%%:*}
  rest=${hit#*:}
  line=${rest%%:*}
  text=${rest#*:}
  [[ $text =~ $include_line ]] || continue
  kind=${BASH_REMATCH[1]} path=${BASH_REMATCH[2]}
  if [[ $kind == '"' ]]; then
    target=$(resolve "$file" "$path")
  elif is_project_path "$path"; then
    target=$path  # a project header written with <...>
  else
    target=""     # a system or third-party header
  fi
  text=${text#"${text%%[![:space:]]*}"}
  [[ -n $target && $target != "$path" ]] && text+="  (= $target)"

  case $file in
    schedule/*)
      if [[ -n $target ]]; then
        [[ $target == schedule/* ]] ||
          report "$file" "$line" "$text" "schedule/ includes only schedule/ and the standard library" "$target"
      elif ! is_std_header "$path"; then
        report "$file" "$line" "$text" "schedule/ includes only schedule/ and the standard library (<vector>, <cstdint>, ...)" "$path"
      fi ;;
    layers/*)
      [[ -z $target || $target == layers/* || $target == engine/core/* ]] ||
        report "$file" "$line" "$text" "layers/ includes only layers/ and engine/core/" "$target" ;;
    kernels/*)
      [[ -z $target || $target == kernels/* || $target == engine/core/* ]] ||
        report "$file" "$line" "$text" "kernels/ includes only kernels/ and engine/core/" "$target" ;;
  esac
  if [[ $file == engine/core/* && -n $target && $target != engine/core/* ]]; then
    report "$file" "$line" "$text" "engine/core/ includes only engine/core/" "$target"
  fi
  if [[ $file == engine/*/* && $target == engine/*/* ]]; then
    from=${file#engine/} to=${target#engine/}
    from=${from%%/*} to=${to%%/*}
    if [[ -z ${engine_level[$from]:-} ]]; then
      report "$file" "$line" "$text" "engine/$from/ is not in engine_layers of $0: add it where it belongs (and to ARCHITECTURE.md)" "$target"
    elif [[ -z ${engine_level[$to]:-} ]] || ((engine_level[$to] > engine_level[$from])); then
      report "$file" "$line" "$text" "engine/$from/ may not include engine/$to/, a layer above it (ARCHITECTURE.md): move the shared piece down, or pass it in through an interface" "$target"
    fi
  fi
  if [[ $file == engine/* && $file != engine/cuda/* ]]; then
    if [[ -z $target ]] && is_cuda_header "$path"; then
      report "$file" "$line" "$text" "engine/ outside engine/cuda/ includes no CUDA header" "$path"
    elif [[ $target == kernels/cpu/* ]]; then
      report "$file" "$line" "$text" "engine/ outside engine/cuda/ includes no kernels/cpu/ header (go through engine/core/backend.h)" "$target"
    fi
  fi
done < <(git grep -nE '^[[:space:]]*#[[:space:]]*include' -- schedule layers kernels engine)

# engine/ holds folders only: each source file belongs to the folder named for its job.
while IFS= read -r loose; do
  echo "$loose: a loose source file at the top of engine/: move it into the folder of its job"
  violations=$((violations + 1))
done < <(git ls-files -- 'engine/*.h' 'engine/*.cpp' | grep -v '^engine/.*/')

stale=0
for key in "${!exception_reason[@]}"; do
  if [[ -z ${exception_hit[$key]:-} ]]; then
    echo "stale known exception '$key': it no longer violates; remove it from known_exceptions in $0"
    stale=$((stale + 1))
  fi
done

if ((violations || stale)); then
  echo "check-includes: $violations violating line(s)$( ((known)) && echo ", $known of them known exceptions")$( ((stale)) && echo ", $stale stale exception(s)")"
  exit 1
fi
echo "check-includes: the include rules hold$( ((known)) && echo " ($known known exception(s) allowed)")"
