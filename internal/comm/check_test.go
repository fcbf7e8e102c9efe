package comm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// postSig writes a descriptor as checkPost does.
func postSig(b *checkBoard, rank int, seq uint64, fn int32) {
	b.at(rank, seq).post(seq, sig{fn: fn, dt: 7, count: 100, win: -1})
}

// TestCheckLostTrack: a rank more than the ring ahead of a watcher
// overwrites slots the watcher has not compared; the watcher counts them
// as lost (and warns) instead of comparing a torn or foreign slot, and
// still compares what remains, reporting a real mismatch.
func TestCheckLostTrack(t *testing.T) {
	b := &checkBoard{mem: make([]byte, 2*checkRing*slotBytes), n: 2}
	c := &Comm{rank: 0}
	const ahead = checkRing + 100
	for seq := uint64(1); seq <= ahead; seq++ {
		postSig(b, 1, seq, 2)
	}
	for seq := uint64(1); seq <= ahead; seq++ {
		postSig(b, 0, seq, 2)
	}
	next := uint64(1)
	require.NoError(t, c.checkScan(b, &next))
	require.Equal(t, uint64(ahead+1), next, "every sequence passed")
	require.Equal(t, uint64(100), b.lostN, "the overwritten ones counted as lost")

	postSig(b, 0, ahead+1, 2)
	postSig(b, 1, ahead+1, 8) // another collective
	err := c.checkScan(b, &next)
	require.Error(t, err)
	require.Contains(t, err.Error(), "differs between ranks")
}
