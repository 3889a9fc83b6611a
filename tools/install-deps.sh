#!/usr/bin/env bash
# install-deps.sh - installs the Debian packages ingot needs (DESIGN section 2), only those that
# are missing. Runs apt-get update first only when a package is not known to apt. Never asks
# questions. Without root and without password-less sudo it prints the exact command and fails.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  libzstd-dev zstd libxxhash-dev libfyaml-dev libjansson-dev libutf8proc-dev unicode-data
  libcmocka-dev libopenmpi-dev openmpi-bin
  libopenblas-dev libdnnl-dev
  libisal-dev
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev ffmpeg
  clang libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PACKAGES[@]} packages are installed"
  exit 0
fi

cmd=(apt-get install -y --no-install-recommends "${missing[@]}")
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "deps: missing packages: ${missing[*]}" >&2
  echo "deps: run this as root, then run make again:" >&2
  echo "  apt-get update && DEBIAN_FRONTEND=noninteractive ${cmd[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "deps: installing ${missing[*]}"
needs_update=0
for p in "${missing[@]}"; do
  apt-cache show "$p" >/dev/null 2>&1 || needs_update=1
done
if [ $needs_update -eq 1 ]; then
  "${sudo[@]}" apt-get update -q </dev/null
fi
if ! "${sudo[@]}" "${cmd[@]}" </dev/null; then
  # the package lists may be stale (a 404 on a superseded version): refresh once and retry
  "${sudo[@]}" apt-get update -q </dev/null
  "${sudo[@]}" "${cmd[@]}" </dev/null
fi
