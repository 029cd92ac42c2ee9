#!/usr/bin/env bash
# Prints, one per line, the packages (dpkg) whose shared libraries the given binaries load.
#
# The image build runs this in the build stage and installs exactly these packages in the
# runtime stage (same distribution release, so the names match): the final image gets gRPC,
# protobuf, absl, spdlog, fmt, pcre2, OpenBLAS, ... from the distribution, not copied .so
# files, and no -dev package or compiler.
#
# Left out: libraries under a CUDA toolkit prefix (the CUDA runtime base image has them) and
# the driver's libraries (libcuda, libnvidia-*), which the NVIDIA container toolkit mounts
# at run time. Any other library ldd cannot find is an error.
#
# Usage: runtime-deps.sh BINARY...
set -euo pipefail
(($#)) || { echo "usage: $0 BINARY..." >&2; exit 2; }

declare -A pkgs=()
status=0
for bin in "$@"; do
  if ! deps=$(ldd "$bin" 2>&1); then
    echo "runtime-deps.sh: ldd $bin failed: $deps" >&2
    status=1
    continue
  fi
  while read -r line; do
    # "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)" or "libbar.so => not found"
    lib=$(awk '{print $1}' <<<"$line")
    path=$(awk '$2 == "=>" {print $3}' <<<"$line")
    case "$lib" in
      libcuda.so* | libnvidia-* | libnvidia_* ) continue ;;  # from the driver, at run time
    esac
    if [[ "$path" == "not" ]]; then
      echo "runtime-deps.sh: $bin needs $lib, which ldd cannot find" >&2
      status=1
      continue
    fi
    [[ -n "$path" && "$path" == /* ]] || continue  # linux-vdso and the loader line
    real=$(realpath "$path")
    case "$real" in
      /usr/local/cuda* | /opt/nvidia/*) continue ;;  # the CUDA base image provides these
    esac
    # Merged-/usr systems record some files under /lib and others under /usr/lib.
    owner=""
    for candidate in "$real" "${real#/usr}" "/usr$real" "$path"; do
      if owner=$(dpkg-query -S "$candidate" 2>/dev/null | head -n1 | cut -d: -f1 | cut -d, -f1); then
        [[ -n "$owner" ]] && break
      fi
    done
    if [[ -z "$owner" ]]; then
      echo "runtime-deps.sh: no package owns $real (needed by $bin)" >&2
      status=1
      continue
    fi
    pkgs[$owner]=1
  done <<<"$deps"
done
((status == 0)) || exit "$status"
printf '%s\n' "${!pkgs[@]}" | sort
