#!/usr/bin/env bash
# Installs, with apt-get, exactly what batchcheck needs and this machine lacks.
# Idempotent: prints nothing and touches nothing when everything is already there.
set -euo pipefail

PACKAGES=(
  cmake g++ make ninja-build
  libtorch-dev libcli11-dev libspdlog-dev nlohmann-json3-dev
  libgtest-dev libbenchmark-dev
  python3-torch python3-torchvision python3-numpy
)
# clang builds the libFuzzer targets; optional for the rest.
if [[ "${BATCHCHECK_WITH_FUZZ:-1}" == 1 ]]; then PACKAGES+=(clang); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
