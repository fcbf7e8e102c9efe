package peermem

import (
	"math"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/bootstrap"
	"cecoll/internal/hip"
)

// Fuzz targets for what a peer sends this package: a request to the fd
// socket, the answer's control message, and a window claim. Plain `go
// test` runs their seed corpora; `make fuzz` runs each for FUZZTIME.

func FuzzFDRequest(f *testing.F) {
	sec := bootstrap.Secret{Key: 99, Tag: [bootstrap.TagBytes]byte{1, 2, 3}}
	req := encodeFDRequest(sec, 0x7f1234560000)
	f.Add(req[:])
	req = encodeFDRequest(sec, 1) // a tag that is no allocation (internal/comm's CECOLL_CHECK board)
	f.Add(req[:])
	f.Fuzz(func(t *testing.T, p []byte) {
		var b [fdReqBytes]byte
		copy(b[:], p)
		s, base := parseFDRequest(b)
		require.Equal(t, b, encodeFDRequest(s, base))
	})
}

// The answer's control message: whatever it holds, every fd it names is
// returned for the caller to close. (The fuzzer's fds are only numbers
// here; nothing is closed.)
func FuzzRights(f *testing.F) {
	f.Add(syscall.UnixRights(7))
	f.Add(syscall.UnixRights(7, 8, 9))
	f.Add(append(syscall.UnixRights(3), syscall.UnixRights(4)...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, oob []byte) {
		fds, err := parseRights(oob)
		if err == nil {
			require.LessOrEqual(t, 4*len(fds), len(oob))
		}
	})
}

func FuzzClaim(f *testing.F) {
	good := Claim{Base: 0x7f0000001000, Size: 1 << 20, AllocBase: 0x7f0000000000, AllocSize: 2 << 20, OK: true}
	f.Add(good.Encode())
	bad := good
	bad.Base = bad.AllocBase + hip.DevicePtr(bad.AllocSize) + 4096 // outside its mapping
	f.Add(bad.Encode())
	bad = good
	bad.Size = math.MaxUint64 - 100 // wraps
	f.Add(bad.Encode())
	bad = good
	bad.OK = false
	f.Add(bad.Encode())
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := ParseClaim(p)
		if err != nil {
			return
		}
		require.Equal(t, p, m.Encode())
		if m.Fits() == nil {
			lo, off := uint64(m.AllocBase), uint64(m.Base-m.AllocBase)
			require.GreaterOrEqual(t, uint64(m.Base), lo)
			require.LessOrEqual(t, off, uint64(m.AllocSize))
			require.LessOrEqual(t, uint64(m.Size), uint64(m.AllocSize)-off)
			require.NotZero(t, m.Size)
		}
	})
}
