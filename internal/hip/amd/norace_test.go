//go:build !race

package amd

const raceEnabled = false
