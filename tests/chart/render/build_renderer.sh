#!/usr/bin/env bash
# Builds chart-render offline from Debian's Go sources.
#
# Debian installs Go libraries as source under /usr/share/gocode/src, without the /vN suffix
# of their module paths (github.com/Masterminds/sprig holds module .../sprig/v3), so neither
# GOPATH mode (no /vN resolution outside GOPATH) nor replace directives (the graph then needs
# go.mod files of test-only dependencies Debian does not ship) work. Vendor mode does: we copy
# the module into WORK, point vendor/<module path> at each Debian source folder with a
# symlink, write vendor/modules.txt from go.mod's require list, and build with -mod=vendor and
# no proxy, so nothing is downloaded.
#
# Usage: build_renderer.sh SRC_DIR WORK_DIR OUTPUT_BINARY
set -euo pipefail
src=$(realpath "$1") work=$(realpath -m "$2") out=$(realpath -m "$3")
gocode=${GOCODE:-/usr/share/gocode/src}

rm -rf "$work/module"
mkdir -p "$work/module/vendor"
cp "$src"/go.mod "$src"/*.go "$work/module/"

modules_txt="$work/module/vendor/modules.txt"
: >"$modules_txt"
# Each "<module> <version>" line of the require block.
sed -n '/^require (/,/^)/p' "$src/go.mod" | grep -E '^\s+[a-z]' | while read -r mod ver; do
  dir="$gocode/$(echo "$mod" | sed -E 's#/v[0-9]+$##')"
  if [ ! -d "$dir" ]; then
    echo "build_renderer.sh: $mod is not installed at $dir (install the Debian package" \
         "golang-$(echo "$mod" | cut -d/ -f2- | tr '/.' '--' | tr 'A-Z' 'a-z')-dev)" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$work/module/vendor/$mod")"
  ln -sfn "$dir" "$work/module/vendor/$mod"
  printf '# %s %s\n## explicit\n' "$mod" "$ver" >>"$modules_txt"
  # Every folder with non-test Go files is a package of this module.
  (cd "$dir" && find -L . -name '*.go' ! -name '*_test.go' ! -path '*/testdata/*' \
     ! -path '*/internal/testenv*' -printf '%h\n' | sort -u) | while read -r rel; do
    echo "$mod${rel#.}" >>"$modules_txt"
  done
done

cd "$work/module"
GOFLAGS=-mod=vendor GOPROXY=off GO111MODULE=on GOCACHE="$work/gocache" \
  GOPATH="$work/gopath" go build -o "$out" .
