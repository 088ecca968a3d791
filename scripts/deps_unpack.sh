#!/usr/bin/env bash
# Unpacks the .deb files in deps-debs/ (scripts/deps_download.sh) into the local prefix .deps/,
# which the Makefile picks up (include path, library path and rpath). No root needed.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
debs=(deps-debs/*.deb)
if [ ${#debs[@]} -eq 0 ]; then
  echo "deps_unpack: no .deb files in deps-debs/ (run scripts/deps_download.sh on a connected machine)" >&2
  exit 1
fi
mkdir -p .deps
for f in "${debs[@]}"; do dpkg-deb -x "$f" .deps; done
echo "deps_unpack: unpacked ${#debs[@]} packages into .deps/"
