#!/usr/bin/env bash
# make test-lint: the habits every change keeps, checked in every Go module
# of the tree (the library's, tools/plot, tools/lint):
#   gofmt -l lists nothing; go vet; go mod tidy would change nothing;
#   staticcheck, at the version this folder's go.mod pins, built into
#   build/staticcheck. Without the Go module proxy staticcheck cannot be
#   fetched: it is then skipped, loudly, and the rest still runs.
# The package import rules are a Go test (internal/imports_test.go).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
GO=${GO:-go}
modules=". tools/plot"
fail() { echo "test-lint: $*"; exit 1; }

out=$(gofmt -l .)
[ -z "$out" ] || { echo "$out"; fail "gofmt -l lists the files above"; }
for m in $modules; do
  (cd "$m" && $GO vet ./...) || fail "go vet found the above in $m"
  (cd "$m" && $GO mod tidy -diff) || fail "go mod tidy would change $m's go.mod or go.sum (above)"
done

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! (cd tools/lint && $GO mod download honnef.co/go/tools) >"$log" 2>&1; then
  echo "################################################################"
  echo "## SKIPPED: staticcheck: it cannot be fetched from the Go module proxy"
  sed 's/^/##   /' "$log"
  echo "################################################################"
  echo "test-lint: gofmt, go vet and go mod tidy are clean; staticcheck SKIPPED"
  exit 0
fi
(cd tools/lint && $GO mod tidy -diff) || fail "go mod tidy would change tools/lint's go.mod or go.sum (above)"
mkdir -p build
(cd tools/lint && $GO build -o ../../build/staticcheck honnef.co/go/tools/cmd/staticcheck) || fail "staticcheck does not build"
for m in $modules; do
  (cd "$m" && "$root/build/staticcheck" ./...) || fail "staticcheck found the above in $m"
done
echo "test-lint: gofmt, go vet, go mod tidy and staticcheck ($(build/staticcheck -version)) are clean"
