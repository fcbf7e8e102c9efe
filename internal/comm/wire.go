package comm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frames of the TCP bootstrap: u32 payload length (little-endian), u8
// type, payload. Every frame is written with one Write under the sender's
// write lock, so frames never interleave.
const (
	frHello  byte = 1 // rank -> root: who I am
	frTable  byte = 2 // root -> rank: every rank's entry
	frFail   byte = 3 // root -> rank: the communicator cannot form
	frGather byte = 4 // both ways: one allgather round
	frAbort  byte = 5 // both ways: the communicator is dead
	frBye    byte = 6 // rank -> root: clean departure
)

// Size limits on what a peer may make us allocate.
const (
	maxHelloFrame = 4096
	maxFrame      = 64 << 20
)

func writeFrame(w io.Writer, typ byte, payload []byte) error {
	b := make([]byte, 5+len(payload))
	binary.LittleEndian.PutUint32(b, uint32(len(payload)))
	b[4] = typ
	copy(b[5:], payload)
	_, err := w.Write(b)
	return err
}

func readFrame(r *bufio.Reader, limit int) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(h[:4])
	if int64(n) > int64(limit) {
		return 0, nil, fmt.Errorf("frame of %d bytes exceeds the limit of %d", n, limit)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	return h[4], p, nil
}

// enc builds a payload.
type enc struct{ b []byte }

func (e *enc) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) bytes(v []byte) {
	e.u32(uint32(len(v)))
	e.b = append(e.b, v...)
}
func (e *enc) str(s string) { e.bytes([]byte(s)) }

// dec reads a payload; the first short read sets err and zeroes the rest.
type dec struct {
	b   []byte
	err error
}

var errShort = errors.New("truncated frame")

func (d *dec) take(n int) []byte {
	if d.err != nil || n < 0 || len(d.b) < n {
		d.err = errShort
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (d *dec) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (d *dec) bytes() []byte { return d.take(int(d.u32())) }
func (d *dec) str() string   { return string(d.bytes()) }
