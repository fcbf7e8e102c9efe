package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
)

// Report is the part of cecoll-perf's JSON the plot reads.
type Report struct {
	Backend    string  `json:"backend"`
	NRanks     int     `json:"nranks"`
	Procs      int     `json:"procs"`
	Graph      bool    `json:"graph"`
	Registered bool    `json:"registered"`
	Type       string  `json:"type"`
	Ceiling    Ceiling `json:"ceiling"`
	Rows       []Row   `json:"rows"`
}

// Ceiling is one large device-to-device copy's rate, in bytes copied per second.
type Ceiling struct {
	BytesPerS *float64 `json:"bytes_per_s"`
	GBps      *float64 `json:"gbps"`
	CopyBytes int64    `json:"copy_bytes"`
}

// Row is one measured size of one collective, in or out of place. Pointers
// are values cecoll-perf may write as null.
type Row struct {
	Collective   string   `json:"collective"`
	Size         int64    `json:"size"`
	InPlace      bool     `json:"in_place"`
	TimeUs       *float64 `json:"time_us"`
	BusBw        *float64 `json:"busbw"`
	Wrong        *int64   `json:"wrong"`
	CeilFraction *float64 `json:"ceil_fraction"`
}

// Point is one plotted (size, busbw) pair.
type Point struct {
	Size  float64
	BusBw float64
}

// ReadReport decodes cecoll-perf's JSON and refuses a file without rows,
// which would otherwise give an empty plot that looks like a result.
func ReadReport(r io.Reader) (*Report, error) {
	var rep Report
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		return nil, fmt.Errorf("decoding cecoll-perf JSON: %w", err)
	}
	if len(rep.Rows) == 0 {
		return nil, fmt.Errorf("cecoll-perf JSON has no rows")
	}
	return &rep, nil
}

// Series returns the out-of-place rows with a bus bandwidth, grouped by
// collective in the order the collectives first appear, each sorted by size.
// Sizes below one byte cannot sit on a log axis and are left out.
func (r *Report) Series() (names []string, series map[string][]Point) {
	series = map[string][]Point{}
	for _, row := range r.Rows {
		if row.InPlace || row.BusBw == nil || row.Size < 1 {
			continue
		}
		if _, ok := series[row.Collective]; !ok {
			names = append(names, row.Collective)
		}
		series[row.Collective] = append(series[row.Collective], Point{float64(row.Size), *row.BusBw})
	}
	for _, n := range names {
		s := series[n]
		sort.Slice(s, func(i, j int) bool { return s[i].Size < s[j].Size })
	}
	return names, series
}

// CeilingGBps is the ceiling in GB/s (1e9 bytes), or false when absent.
func (r *Report) CeilingGBps() (float64, bool) {
	if r.Ceiling.GBps != nil && *r.Ceiling.GBps > 0 {
		return *r.Ceiling.GBps, true
	}
	if r.Ceiling.BytesPerS != nil && *r.Ceiling.BytesPerS > 0 {
		return *r.Ceiling.BytesPerS / 1e9, true
	}
	return 0, false
}
