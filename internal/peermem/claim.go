package peermem

import (
	"encoding/binary"
	"fmt"
	"time"

	"cecoll/internal/bootstrap"
	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// Claim is what a rank tells its peers of the buffer it registers as a
// window: where it is, in which allocation (the one a peer in another
// process maps), and whether its own checks passed. A peer's claim is
// checked before use: its window must lie inside the allocation it claims
// (Fits), the fd it passes must be a sealed memfd at least that long (the
// runtime's MemImport), and copies reach at most the smallest window of
// all ranks (internal/comm), so no peer can make this process write
// outside what it mapped.
type Claim struct {
	Base, AllocBase hip.DevicePtr
	Size, AllocSize uintptr
	OK              bool // its local checks passed
}

// ClaimBytes is an encoded Claim's length.
const ClaimBytes = 33

// Encode is the claim as it travels.
func (m Claim) Encode() []byte {
	b := make([]byte, ClaimBytes)
	binary.LittleEndian.PutUint64(b[0:], uint64(m.Base))
	binary.LittleEndian.PutUint64(b[8:], uint64(m.Size))
	binary.LittleEndian.PutUint64(b[16:], uint64(m.AllocBase))
	binary.LittleEndian.PutUint64(b[24:], uint64(m.AllocSize))
	if m.OK {
		b[32] = 1
	}
	return b
}

// ParseClaim reads a peer's claim (its form; Fits checks its numbers).
func ParseClaim(b []byte) (Claim, error) {
	if len(b) != ClaimBytes {
		return Claim{}, fmt.Errorf("a window message of %d bytes, want %d", len(b), ClaimBytes)
	}
	if b[32] > 1 {
		return Claim{}, fmt.Errorf("a window message with flag %d", b[32])
	}
	return Claim{
		Base:      hip.DevicePtr(binary.LittleEndian.Uint64(b[0:])),
		Size:      uintptr(binary.LittleEndian.Uint64(b[8:])),
		AllocBase: hip.DevicePtr(binary.LittleEndian.Uint64(b[16:])),
		AllocSize: uintptr(binary.LittleEndian.Uint64(b[24:])),
		OK:        b[32] == 1,
	}, nil
}

// Fits checks a peer's window against the allocation it claims: the
// window lies inside it and nothing wraps.
func (m Claim) Fits() error {
	switch {
	case m.Size == 0 || m.AllocSize == 0:
		return fmt.Errorf("window of %d bytes in an allocation of %d", m.Size, m.AllocSize)
	case m.Base < m.AllocBase || uintptr(m.Base-m.AllocBase) > m.AllocSize:
		return fmt.Errorf("window base %#x outside its allocation [%#x, +%d)", m.Base, m.AllocBase, m.AllocSize)
	case m.Size > m.AllocSize-uintptr(m.Base-m.AllocBase):
		return fmt.Errorf("window [%#x, +%d) runs past its allocation [%#x, +%d)", m.Base, m.Size, m.AllocBase, m.AllocSize)
	}
	return nil
}

// Map maps, into this process, the allocation a peer claims (m, which
// Fits), asked of the peer's socket sock with sec before deadline: its
// address here, which the caller frees (rt.MemFree) to unmap it.
func Map(rt hip.Runtime, sock string, sec bootstrap.Secret, m Claim, deadline time.Time) (hip.DevicePtr, error) {
	fd, err := Fetch(sock, sec, m.AllocBase, deadline)
	if err != nil {
		return 0, result.Errorf(result.SystemError, "fetching its allocation: %w", err)
	}
	defer closeFD(fd)
	p, err := rt.MemImport(fd, m.AllocSize)
	if err != nil {
		return 0, result.Errorf(result.Of(err), "mapping its allocation (%d bytes): %w", m.AllocSize, err)
	}
	return p, nil
}
