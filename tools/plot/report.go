package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
)

// Report is the part of cecoll-perf's JSON the plot reads.
type Report struct {
	Backend  string `json:"backend"`
	NRanks   int    `json:"nranks"`
	Procs    int    `json:"procs"`
	Graph    bool   `json:"graph"`
	Register int    `json:"register"` // -R: 0 none, 1 ncclCommRegister, 2 symmetric windows
	Rows     []Row  `json:"rows"`
}

// Row is one measured size of one collective, in or out of place. Pointers
// are values cecoll-perf may write as null. CeilFraction is the copy
// ceiling's time over the collective's, measured with the row.
type Row struct {
	Collective   string   `json:"collective"`
	Size         int64    `json:"size"`
	Type         string   `json:"type"`
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
// collective in the order the collectives first appear, each sorted by size,
// and for each collective the busbw it would reach at its rows' copy
// ceilings (busbw / ceil_fraction, where the row has one). Sizes below one
// byte cannot sit on a log axis and are left out.
func (r *Report) Series() (names []string, series, ceilings map[string][]Point) {
	series, ceilings = map[string][]Point{}, map[string][]Point{}
	for _, row := range r.Rows {
		if row.InPlace || row.BusBw == nil || row.Size < 1 {
			continue
		}
		if _, ok := series[row.Collective]; !ok {
			names = append(names, row.Collective)
		}
		series[row.Collective] = append(series[row.Collective], Point{float64(row.Size), *row.BusBw})
		if f := row.CeilFraction; f != nil && *f > 0 {
			ceilings[row.Collective] = append(ceilings[row.Collective], Point{float64(row.Size), *row.BusBw / *f})
		}
	}
	for _, m := range []map[string][]Point{series, ceilings} {
		for _, s := range m {
			sort.Slice(s, func(i, j int) bool { return s[i].Size < s[j].Size })
		}
	}
	return names, series, ceilings
}

// Types lists the datatypes of the rows, in order of appearance.
func (r *Report) Types() []string {
	var types []string
	seen := map[string]bool{}
	for _, row := range r.Rows {
		if row.Type != "" && !seen[row.Type] {
			seen[row.Type] = true
			types = append(types, row.Type)
		}
	}
	return types
}
