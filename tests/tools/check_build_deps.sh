#!/usr/bin/env bash
# What this build read, against what it may read (tools/build_deps.py), for ctest:
#   check_build_deps.sh torch BUILD DIR...             LibTorch headers only from the configured torch
#   check_build_deps.sh packages BUILD TORCH [ALLOW...] every other file from the packages that
#       scripts/setup.sh installs for this build's tier (TORCH: pip, debian or python, as
#       scripts/torch-env.sh), and for the default build also the demo's targets against the
#       demo's set-up (README command 1 installs less).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
check=$1 build=$2
shift 2
py=$(command -v python3)
if [[ $check == torch ]]; then
  exec "$py" "$here/tools/build_deps.py" torch "$build" --include "$@"
fi
torch=$1
shift
if ! command -v dpkg-query >/dev/null 2>&1 || [[ ! -r /var/lib/dpkg/status ]]; then
  echo "no dpkg here: the packages check reads Debian's package database"
  exit 77  # ctest's skip (SKIP_RETURN_CODE)
fi
env_of() {
  case $torch in
    python) echo "BATCHCHECK_PYTHON=$py" ;;
    *) echo "BATCHCHECK_TORCH=$torch" ;;
  esac
}
status=0
mapfile -t all < <(env "$(env_of)" BATCHCHECK_SETUP=all "$here/scripts/setup.sh" --print-packages)
echo "== the whole build against scripts/setup.sh's packages for it"
"$py" "$here/tools/build_deps.py" packages "$build" --source "$here" --packages "${all[@]}" --allow "$@" || status=1
if [[ $torch == pip ]]; then
  mapfile -t demo < <(BATCHCHECK_TORCH=pip BATCHCHECK_SETUP=demo "$here/scripts/setup.sh" --print-packages)
  echo "== README command 1's targets (the samples' generator, the command and its engine) against its set-up"
  "$py" "$here/tools/build_deps.py" packages "$build" --source "$here" --packages "${demo[@]}" --allow "$@" \
    --targets samples batchcheck batchcheck_scan || status=1
fi
exit $status
