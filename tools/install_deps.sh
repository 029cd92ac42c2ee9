#!/usr/bin/env bash
# Installs the build and test dependencies from Debian's packages (idempotent).
set -euo pipefail
PKGS=(build-essential cmake ninja-build ccache pkg-config git
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev
      libspdlog-dev libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev
      libpcre2-dev libabsl-dev libopenblas-dev libcpp-httplib-dev libssl-dev
      python3 python3-grpcio python3-protobuf python3-venv curl openssl
      golang-go golang-github-masterminds-sprig-dev yamllint python3-jsonschema)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
