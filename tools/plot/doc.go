// Command cecoll-plot renders the JSON that cecoll-perf writes (--json) as a
// PNG: bus bandwidth against message size, on a log2 size axis, one line per
// collective (out-of-place rows), each with a dashed line at the busbw its
// rows' copy ceilings allow (cecoll-perf -h defines the ceiling).
//
//	cecoll-plot -in build/perf.json -out build/perf.png
//
// It is its own Go module (cecoll/tools/plot), not a package of cecoll,
// because it needs gonum.org/v1/plot and that library's dependencies
// (fonts, image, PDF and SVG back ends). Keeping them in this go.mod leaves
// the library's go.mod with its three dependencies, so building or vetting
// libcecoll.so never downloads a plotting stack; `go test ./...` at the repo
// root does not descend into this module either. `make plot` and `make run`
// build it as build/cecoll-plot, next to cecoll-perf, which runs it for
// --plot.
package main
