package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

func main() {
	in := flag.String("in", "build/perf.json", "cecoll-perf --json output")
	out := flag.String("out", "build/perf.png", "PNG to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "cecoll-plot:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	rep, err := ReadReport(f)
	if err != nil {
		return err
	}
	p, err := Render(rep)
	if err != nil {
		return err
	}
	return p.Save(10*vg.Inch, 6*vg.Inch, out)
}

// Render builds the plot: busbw against size, log2 size axis, one line per
// collective and, dashed, the busbw each would reach at its rows' copy
// ceilings.
func Render(rep *Report) (*plot.Plot, error) {
	names, series, ceilings := rep.Series()
	if len(names) == 0 {
		return nil, fmt.Errorf("nothing to plot: no out-of-place rows with a bus bandwidth")
	}
	p := plot.New()
	mode := "calls"
	if rep.Graph {
		mode = "graph replays"
	}
	bufs := map[int]string{0: "unregistered", 1: "ncclCommRegister'd", 2: "symmetric-window"}[rep.Register]
	p.Title.Text = fmt.Sprintf("cecoll-perf: backend %s, %d ranks in %d process(es), %s buffers, %s, %s, out of place",
		rep.Backend, rep.NRanks, max(rep.Procs, 1), bufs, strings.Join(rep.Types(), "/"), mode)
	p.X.Label.Text = "size (bytes, all ranks' chunks, as nccl-tests; log2 scale)"
	p.Y.Label.Text = "busbw (GB/s)"
	p.X.Scale = plot.LogScale{}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())

	lo, hi := math.Inf(1), math.Inf(-1)
	ymax := 0.0
	for i, n := range names {
		pts := make(plotter.XYs, len(series[n]))
		for k, pt := range series[n] {
			pts[k] = plotter.XY{X: pt.Size, Y: pt.BusBw}
			lo, hi = math.Min(lo, pt.Size), math.Max(hi, pt.Size)
			ymax = math.Max(ymax, pt.BusBw)
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		c := plotutil.Color(i)
		l.Color, s.Color = c, c
		l.Width = vg.Points(2)
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(n, l, s)
	}
	p.X.Tick.Marker = plot.TickerFunc(sizeTicks(names, series))
	for i, n := range names {
		if len(ceilings[n]) == 0 {
			continue
		}
		// The busbw the collective would show at its rows' copy ceilings:
		// dashed, in the collective's colour.
		pts := make(plotter.XYs, len(ceilings[n]))
		for k, pt := range ceilings[n] {
			pts[k] = plotter.XY{X: pt.Size, Y: pt.BusBw}
			ymax = math.Max(ymax, pt.BusBw)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("%s ceiling: %w", n, err)
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(l)
		p.Legend.Add(n+" at the copy ceiling", l)
	}
	p.Y.Min = 0
	p.Y.Tick.Marker = plot.TickerFunc(linearTicks)
	// Headroom above the highest line keeps the legend (top left) off the data.
	p.Y.Max = ymax * 1.3
	if lo == hi {
		// One size: give the log axis a width.
		p.X.Min, p.X.Max = lo/2, hi*2
	}
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Legend.Padding = vg.Points(2)
	p.Legend.ThumbnailWidth = vg.Points(24)
	return p, nil
}

// linearTicks labels about 6 round values (1, 2, 2.5 or 5 times a power of
// ten) between min and max; gonum's default labels only two on some ranges.
func linearTicks(min, max float64) []plot.Tick {
	if !(max > min) {
		return []plot.Tick{{Value: min, Label: strconv.FormatFloat(min, 'g', 4, 64)}}
	}
	raw := (max - min) / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(min/step) * step; v <= max+step*1e-9; v += step {
		// Round away the float drift of repeated addition before labelling.
		v = math.Round(v/step) * step
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', 4, 64)})
		if half := v + step/2; half <= max {
			ticks = append(ticks, plot.Tick{Value: half})
		}
	}
	return ticks
}

// sizeTicks labels the measured sizes (every k-th when there are more
// than 14), with unlabelled ticks on the powers of two between them.
func sizeTicks(names []string, series map[string][]Point) func(min, max float64) []plot.Tick {
	seen := map[float64]bool{}
	var sizes []float64
	for _, n := range names {
		for _, pt := range series[n] {
			if !seen[pt.Size] {
				seen[pt.Size] = true
				sizes = append(sizes, pt.Size)
			}
		}
	}
	sort.Float64s(sizes)
	step := (len(sizes) + 13) / 14
	return func(min, max float64) []plot.Tick {
		var ticks []plot.Tick
		labelled := map[float64]bool{}
		for i, v := range sizes {
			if i%step == 0 && v >= min && v <= max {
				ticks = append(ticks, plot.Tick{Value: v, Label: sizeLabel(v)})
				labelled[v] = true
			}
		}
		if min > 0 {
			for e := math.Ceil(math.Log2(min)); math.Exp2(e) <= max; e++ {
				if v := math.Exp2(e); !labelled[v] {
					ticks = append(ticks, plot.Tick{Value: v})
				}
			}
		}
		return ticks
	}
}

// sizeLabel writes a byte count with the largest binary unit that divides
// it: 8, 3K, 64M, 2G.
func sizeLabel(v float64) string {
	b := int64(v)
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "G"}, {20, "M"}, {10, "K"}} {
		if b >= 1<<u.shift && b%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", b>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d", b)
}
