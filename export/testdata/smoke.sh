#!/bin/sh
# smoke.sh: builds libcecoll.so (export/build.sh) and runs export/testdata/smoke.c
# against it, compiled with -Wall -Werror against include/ only.
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
sh "$root/export/build.sh"
${CC:-gcc} -Wall -Werror -I"$root/include" -o "$root/build/smoke" "$root/export/testdata/smoke.c" \
  -L"$root/build" -lcecoll -Wl,-rpath,"$root/build"
"$root/build/smoke"
