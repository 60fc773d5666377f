#!/usr/bin/env bash
# Static check: every tracked C++/CUDA source (*.h *.cpp *.cu *.cuh) is formatted as .clang-format
# says. Prints the files that are not and how to fix them; exits 1 if any. Needs only bash, git
# and clang-format (Debian's clang-format 14; scripts/install-deps.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v clang-format >/dev/null; then
  echo "check-format: clang-format is not installed (apt-get install clang-format, or run" \
    "scripts/install-deps.sh)" >&2
  exit 2
fi
# CI runs as root in a fresh clone it may not own: let git read this one tree anyway.
git() { command git -c safe.directory="$PWD" "$@"; }

patterns=('*.h' '*.cpp' '*.cu' '*.cuh')
mapfile -t files < <(git ls-files -- "${patterns[@]}")
if ((${#files[@]} == 0)); then
  echo "check-format: git ls-files found no sources (not a git checkout?)" >&2
  exit 2
fi

# One clang-format run over all files; each violation is reported as
# "path:line:col: error: code should be clang-formatted [-Wclang-format-violations]".
rc=0
report=$(clang-format --style=file --dry-run --Werror "${files[@]}" 2>&1) || rc=$?
declare -A seen=()
bad=()
violation='^(.+):[0-9]+:[0-9]+: (error|warning): code should be clang-formatted'
while IFS= read -r line; do
  if [[ $line =~ $violation ]] && [[ -z ${seen[${BASH_REMATCH[1]}]:-} ]]; then
    seen[${BASH_REMATCH[1]}]=1
    bad+=("${BASH_REMATCH[1]}")
  fi
done <<<"$report"

if ((${#bad[@]})); then
  echo "check-format: ${#bad[@]} of ${#files[@]} files are not formatted as .clang-format says:"
  printf '  %s\n' "${bad[@]}"
  echo "fix: clang-format -i \$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')"
  exit 1
fi
if ((rc != 0)); then  # failed for another reason (a file it cannot read, a bad .clang-format)
  echo "check-format: clang-format failed (exit $rc):" >&2
  echo "$report" >&2
  exit 2
fi
echo "check-format: all ${#files[@]} C++/CUDA files are formatted"
