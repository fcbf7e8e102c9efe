package comm

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/bootstrap"
	"cecoll/internal/ce"
	"cecoll/internal/hip"
)

// Fuzz targets for what a peer sends this package: its part of the init
// exchange, and its CECOLL_CHECK board slots (internal/bootstrap and
// internal/peermem fuzz the frames and the fd socket these travel in).
// Plain `go test` runs their seed corpora; `make fuzz` runs each for
// FUZZTIME.

// FuzzInitInfo: the init exchange (pair.go), each rank's device, process,
// host, routing policy, real library, engine settings, queues and check,
// decoded from every peer.
func FuzzInitInfo(f *testing.F) {
	f.Add((&initInfo{dev: 1, pid: 7, host: "h", policy: []byte{1, 2}, lib: "libnccl.so.2 (version 22809)"}).encode())
	f.Add((&initInfo{realID: make([]byte, 128), idErr: "no id"}).encode())
	f.Add((&initInfo{engine: engineText(ce.ConfigFromEnv(), hip.Caps{Multicast: true}), queues: 8, memops: true, check: true}).encode())
	var e bootstrap.Enc
	e.U64(0)
	e.U64(0)
	e.U32(0xffffffff)
	f.Add(e.B)
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := decodeInit(p)
		if err != nil {
			return
		}
		require.LessOrEqual(t, len(m.host), 3*bootstrap.MaxHost)
		require.LessOrEqual(t, len(m.lib)+len(m.idErr), 6*bootstrap.MaxText)
		require.Equal(t, m.host, bootstrap.Clean(m.host), "no control characters reach a log line")
		require.Equal(t, m.idErr, bootstrap.Clean(m.idErr))
		require.Equal(t, m.engine, bootstrap.CleanLines(m.engine), "no control characters but newlines")
		back, err := decodeInit(m.encode())
		require.NoError(t, err)
		require.Equal(t, m.dev, back.dev)
		require.Equal(t, m.pid, back.pid)
	})
}

// A CECOLL_CHECK slot as another rank wrote it, read and compared.
func FuzzBoardSlot(f *testing.F) {
	slotBytesOf := func(s sig, seq uint64) []byte {
		b := make([]byte, slotBytes)
		binary.LittleEndian.PutUint64(b[0:], seq)
		binary.LittleEndian.PutUint32(b[8:], uint32(s.fn))
		binary.LittleEndian.PutUint32(b[12:], uint32(s.dt))
		binary.LittleEndian.PutUint32(b[16:], uint32(s.root))
		binary.LittleEndian.PutUint32(b[20:], uint32(s.flags))
		binary.LittleEndian.PutUint64(b[24:], s.count)
		binary.LittleEndian.PutUint64(b[32:], uint64(s.win))
		binary.LittleEndian.PutUint64(b[40:], s.off)
		binary.LittleEndian.PutUint32(b[56:], 1)
		return b
	}
	f.Add(slotBytesOf(sig{fn: int32(ce.FuncAllGather), dt: 7, count: 4096, win: 2, off: 8192}, 1))
	f.Add(slotBytesOf(sig{fn: -1, dt: 99, root: -5, flags: -1, count: math.MaxUint64, win: -1}, 1))
	f.Fuzz(func(t *testing.T, p []byte) {
		mem := make([]byte, 2*checkRing*slotBytes)
		copy(mem[checkRing*slotBytes+slotBytes:], p) // rank 1's slot of seq 1
		b := &checkBoard{mem: mem, n: 2}
		theirs, ok := b.read(1, 1)
		if !ok {
			return
		}
		_ = theirs.String()
		for _, mine := range []sig{
			{fn: int32(ce.FuncAllGather), dt: 7, count: 4096, win: 2, off: 8192},
			{fn: int32(ce.FuncGather), dt: 7, root: 1, flags: flagInPlace, count: 4096, win: 2, off: 8192},
		} {
			_ = mine.mismatch(0, theirs, 1)
			_ = theirs.mismatch(1, mine, 0)
			_ = mine.sameCall(theirs)
		}
	})
}
