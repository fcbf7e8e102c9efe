package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A cut-down cecoll-perf --json output: nulls where cecoll-perf writes them.
const sample = `{
  "tool": "cecoll-perf", "backend": "host", "devices": 8, "nranks": 4, "procs": 1,
  "graph": false, "graph_launches": 0, "register": 2, "iters": 5, "warmup": 1,
  "ceiling": {"method": "x", "tolerance": 0.1},
  "rows": [
    {"collective": "allgather", "size": 4194304, "type": "float", "in_place": false, "time_us": 900, "busbw": 3.5, "wrong": 0, "ceil_fraction": 0.7, "ceil_gbps": 9, "ceil_moved": false},
    {"collective": "allgather", "size": 32, "type": "float", "in_place": false, "time_us": 100, "busbw": 0.0002, "wrong": null, "ceil_fraction": null},
    {"collective": "allgather", "size": 32, "type": "float", "in_place": true, "time_us": 100, "busbw": 0.0002, "wrong": 0, "ceil_fraction": null},
    {"collective": "gather", "size": 32, "type": "float", "in_place": false, "time_us": null, "busbw": null, "wrong": 0, "ceil_fraction": null},
    {"collective": "gather", "size": 4194304, "type": "float", "in_place": false, "time_us": 300, "busbw": 11, "wrong": 0, "ceil_fraction": 0.5, "ceil_moved": true}
  ]
}`

func TestReadReportAndSeries(t *testing.T) {
	rep, err := ReadReport(strings.NewReader(sample))
	require.NoError(t, err)
	require.Equal(t, "host", rep.Backend)
	require.Equal(t, 2, rep.Register)
	require.Equal(t, []string{"float"}, rep.Types())

	names, series, ceilings := rep.Series()
	require.Equal(t, []string{"allgather", "gather"}, names)
	// In-place rows and null busbw are left out; sizes come sorted.
	require.Equal(t, []Point{{32, 0.0002}, {4194304, 3.5}}, series["allgather"])
	require.Equal(t, []Point{{4194304, 11}}, series["gather"])
	// The ceiling lines: busbw / ceil_fraction where a row has one.
	require.Len(t, ceilings["allgather"], 1)
	require.InDelta(t, 5.0, ceilings["allgather"][0].BusBw, 1e-9)
	require.Equal(t, []Point{{4194304, 22}}, ceilings["gather"])
}

func TestReadReportErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"not json", "table", "decoding"},
		{"no rows", `{"backend": "host", "rows": []}`, "no rows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadReport(strings.NewReader(tc.in))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestSizeLabel(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{{8, "8"}, {1000, "1000"}, {1024, "1K"}, {3072, "3K"}, {1 << 20, "1M"}, {3 << 20, "3M"}, {1 << 30, "1G"}, {1536, "1536"}} {
		require.Equal(t, tc.want, sizeLabel(tc.v), "%v", tc.v)
	}
}

func TestSizeTicksLabelMeasuredSizes(t *testing.T) {
	names := []string{"a"}
	series := map[string][]Point{"a": {{32, 1}, {256, 1}, {2048, 1}}}
	var labels []string
	for _, tk := range sizeTicks(names, series)(32, 2048) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	require.Equal(t, []string{"32", "256", "2K"}, labels)
}

func TestRunWritesPNG(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "perf.json"), filepath.Join(dir, "perf.png")
	require.NoError(t, os.WriteFile(in, []byte(sample), 0o644))
	require.NoError(t, run(in, out))
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	require.Greater(t, img.Bounds().Dx(), 500)
	require.Greater(t, img.Bounds().Dy(), 300)
}

func TestRenderRefusesNothingToPlot(t *testing.T) {
	rep, err := ReadReport(strings.NewReader(`{"rows": [{"collective": "a", "size": 8, "in_place": true, "busbw": 1}]}`))
	require.NoError(t, err)
	_, err = Render(rep)
	require.ErrorContains(t, err, "nothing")
}

func TestLinearTicks(t *testing.T) {
	for _, tc := range []struct {
		min, max float64
		want     []string
	}{
		{0, 27.9, []string{"0", "5", "10", "15", "20", "25"}},
		{0, 1.3, []string{"0", "0.25", "0.5", "0.75", "1", "1.25"}},
		{0, 2400, []string{"0", "500", "1000", "1500", "2000"}},
		{3, 3, []string{"3"}},
	} {
		var got []string
		for _, tk := range linearTicks(tc.min, tc.max) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		require.Equal(t, tc.want, got, "%v..%v", tc.min, tc.max)
	}
}
