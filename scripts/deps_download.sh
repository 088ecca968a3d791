#!/usr/bin/env bash
# On a machine WITH a Debian/Ubuntu package registry: download the .deb files of the libraries that
# an offline GPU machine lacks (cJSON, PCRE2, cmocka) into deps-debs/. Then copy the project (with
# deps-debs/) to the GPU machine and run scripts/deps_unpack.sh there.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p deps-debs
cd deps-debs
apt-get download libcjson1 libcjson-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libpcre2-dev \
  libcmocka0 libcmocka-dev
ls -1 *.deb
