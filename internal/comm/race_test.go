//go:build race

package comm

// raceEnabled: the race detector makes sync.Pool drop objects on purpose,
// so allocation counts are not asserted under it.
const raceEnabled = true
