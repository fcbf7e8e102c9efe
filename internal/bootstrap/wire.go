package bootstrap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"cecoll/internal/result"
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

// Limits on what a peer may make this process hold. Every payload below
// is decoded by a pure function (parseXxx) that checks each number against
// them before anything is allocated; the fuzz targets (fuzz_test.go) run
// those functions.
const (
	maxHelloFrame = 4096
	// maxGatherBytes is the most one rank contributes to an allgather
	// (window registration sends 33 bytes).
	maxGatherBytes = 64 << 10
	// maxRankFrame is the most a rank sends the root in one frame after
	// its hello: a gather (seq, length, data) or an abort's text.
	maxRankFrame = maxGatherBytes + 64
	// MaxHost and maxSock bound a hello's strings: a host name, and an
	// abstract socket name (108 bytes of sun_path, the leading NUL
	// written "@").
	MaxHost = 255
	maxSock = 107
	// MaxText bounds a failure's text as relayed.
	MaxText = 4096
	// rootBudget bounds the bytes the root holds for all its peers at
	// once: frames being read, contributions to allgathers in progress
	// and their results being sent.
	rootBudget = 256 << 20
)

// MaxRanks bounds nranks (ncclCommInitRank, a hello): large communicators
// stay possible while no number from a caller or a peer makes the root
// reserve memory for ranks that have not arrived.
const MaxRanks = 1 << 16

// SockPrefix starts every fd-passing socket name (internal/peermem); a table
// entry naming anything else would make its peers connect, and present
// the id's secret, elsewhere.
const SockPrefix = "@cecoll-"

func writeFrame(w io.Writer, typ byte, payload []byte) error {
	b := make([]byte, 5+len(payload))
	binary.LittleEndian.PutUint32(b, uint32(len(payload)))
	b[4] = typ
	copy(b[5:], payload)
	_, err := w.Write(b)
	return err
}

// readFrame reads one frame of at most limit payload bytes. With a budget,
// the payload's bytes are taken from it before they are allocated
// (errBudget when it has not enough) and the caller owns them on success.
func readFrame(r *bufio.Reader, limit int, b *budget) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(h[:4])
	if int64(n) > int64(limit) {
		return 0, nil, fmt.Errorf("%w: %d bytes, at most %d", errTooLarge, n, limit)
	}
	if b != nil && !b.take(int(n)) {
		return 0, nil, errBudget
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		if b != nil {
			b.give(int(n))
		}
		return 0, nil, err
	}
	return h[4], p, nil
}

var (
	errTooLarge = errors.New("frame too large")
	errBudget   = fmt.Errorf("the root holds %d MiB for its peers already", rootBudget>>20)
)

// Enc builds a payload: little-endian numbers, length-prefixed bytes.
// The payloads of internal/comm's exchanges use it too.
type Enc struct{ B []byte }

func (e *Enc) U32(v uint32) { e.B = binary.LittleEndian.AppendUint32(e.B, v) }
func (e *Enc) U64(v uint64) { e.B = binary.LittleEndian.AppendUint64(e.B, v) }
func (e *Enc) Raw(v []byte) { e.B = append(e.B, v...) }
func (e *Enc) Bytes(v []byte) {
	e.U32(uint32(len(v)))
	e.B = append(e.B, v...)
}
func (e *Enc) Str(s string) { e.Bytes([]byte(s)) }

// Dec reads a payload a peer sent; the first short read sets Err and
// zeroes the rest. Every decoder of what peers send checks each number
// against its limits with it before anything is allocated.
type Dec struct {
	B   []byte
	Err error
}

var errShort = errors.New("truncated frame")

func (d *Dec) Take(n int) []byte {
	if d.Err != nil || n < 0 || len(d.B) < n {
		d.Err = errShort
		return nil
	}
	v := d.B[:n]
	d.B = d.B[n:]
	return v
}

func (d *Dec) U32() uint32 {
	if v := d.Take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (d *Dec) U64() uint64 {
	if v := d.Take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

// Bytes reads a length-prefixed field; a length beyond the payload fails
// before anything is allocated (the field aliases the payload).
func (d *Dec) Bytes() []byte {
	n := d.U32()
	if uint64(n) > uint64(len(d.B)) {
		if d.Err == nil {
			d.Err = errShort
		}
		return nil
	}
	return d.Take(int(n))
}

// StrMax reads a string of at most max bytes.
func (d *Dec) StrMax(max int, what string) string {
	b := d.Bytes()
	if d.Err == nil && len(b) > max {
		d.Err = fmt.Errorf("%s of %d bytes (at most %d)", what, len(b), max)
	}
	return string(b)
}

// End fails when bytes are left over: every payload has one exact form.
func (d *Dec) End() error {
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%d bytes after the payload", len(d.B))
	}
	return d.Err
}

// hello is a rank's first frame.
type hello struct {
	sec     Secret
	n, rank int
	pid     uint32
	host    string
	sock    string
	// parent and dtag: a derived id's (DerivedID), else 0.
	parent, dtag uint64
}

func (h *hello) encode() []byte {
	var e Enc
	e.U64(idMagic)
	e.U64(h.sec.Key)
	e.Raw(h.sec.Tag[:])
	e.U32(uint32(h.n))
	e.U32(uint32(h.rank))
	e.U32(h.pid)
	e.Str(h.host)
	e.Str(h.sock)
	if h.parent != 0 {
		e.U64(h.parent)
		e.U64(h.dtag)
	}
	return e.B
}

// parseHello reads a hello's fields; it checks their form, not their
// values (validate does, once the secret is proven).
func parseHello(p []byte) (hello, error) {
	d := Dec{B: p}
	var h hello
	magic := d.U64()
	h.sec.Key = d.U64()
	copy(h.sec.Tag[:], d.Take(TagBytes))
	h.n, h.rank, h.pid = int(int32(d.U32())), int(int32(d.U32())), d.U32()
	h.host = d.StrMax(MaxHost, "host name")
	h.sock = d.StrMax(maxSock, "socket name")
	if d.Err == nil && len(d.B) > 0 {
		h.parent, h.dtag = d.U64(), d.U64()
	}
	if err := d.End(); err != nil {
		return hello{}, err
	}
	if magic != idMagic {
		return hello{}, fmt.Errorf("bad magic %#x", magic)
	}
	return h, nil
}

// validate checks what a hello claims: a rank of a communicator of at most
// MaxRanks ranks, and a socket of this library's.
func (h *hello) validate() error {
	switch {
	case h.n < 1 || h.n > MaxRanks:
		return result.Errorf(result.InvalidArgument, "bootstrap: nranks %d is outside 1..%d", h.n, MaxRanks)
	case h.rank < 0 || h.rank >= h.n:
		return result.Errorf(result.InvalidArgument, "bootstrap: rank %d is outside 0..%d", h.rank, h.n-1)
	case !validSock(h.sock):
		return result.Errorf(result.InvalidArgument, "bootstrap: rank %d names the socket %q, not one of cecoll's", h.rank, h.sock)
	case !printable(h.host):
		return result.Errorf(result.InvalidArgument, "bootstrap: rank %d names the host %q", h.rank, h.host)
	}
	return nil
}

// ours reports whether h presents the secret of an id this process made,
// or of one derived from such an id (the parent's tag proves the parent's
// key, from which the derived key must follow).
func (h *hello) ours() bool {
	if h.parent == 0 {
		return h.sec.ours()
	}
	p := Secret{Key: h.parent, Tag: h.sec.Tag}
	return p.ours() && deriveKey(h.parent, h.dtag) == h.sec.Key
}

func validSock(s string) bool {
	return strings.HasPrefix(s, SockPrefix) && len(s) <= maxSock && printable(s)
}

// printable reports whether s is printable ASCII: a peer's names end up in
// log lines, where a newline would forge one.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// clean makes a peer's text safe for a log line: valid UTF-8, no control
// characters.
func Clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

// cleanLines is clean for a text of lines: the newlines stay, each line
// is cleaned.
func CleanLines(s string) string {
	ls := strings.Split(s, "\n")
	for i, l := range ls {
		ls[i] = Clean(l)
	}
	return strings.Join(ls, "\n")
}

// encodeTable is the root's answer once every rank arrived.
func encodeTable(ranks []*rootRank) []byte {
	var e Enc
	e.U32(uint32(len(ranks)))
	for _, r := range ranks {
		e.U32(r.pid)
		e.Str(r.host)
		e.Str(r.sock)
	}
	return e.B
}

// parseTable reads the table of an n-rank communicator.
func parseTable(p []byte, n int) ([]Peer, error) {
	d := Dec{B: p}
	if got := d.U32(); d.Err == nil && int64(got) != int64(n) {
		return nil, fmt.Errorf("a table of %d ranks, want %d", got, n)
	}
	// Each entry takes 12 bytes at least: no allocation beyond what came.
	if d.Err != nil || len(d.B)/12 < n {
		return nil, errShort
	}
	table := make([]Peer, n)
	for i := range table {
		table[i] = Peer{Pid: d.U32(), Host: d.StrMax(MaxHost, "host name"), Sock: d.StrMax(maxSock, "socket name")}
		if d.Err == nil && !validSock(table[i].Sock) {
			return nil, fmt.Errorf("rank %d names the socket %q, not one of cecoll's", i, table[i].Sock)
		}
		if d.Err == nil && !printable(table[i].Host) {
			return nil, fmt.Errorf("rank %d names the host %q", i, table[i].Host)
		}
	}
	if err := d.End(); err != nil {
		return nil, err
	}
	return table, nil
}

// encodeGather is a rank's contribution to round seq.
func encodeGather(seq uint64, data []byte) []byte {
	var e Enc
	e.U64(seq)
	e.Bytes(data)
	return e.B
}

// parseGather reads a rank's contribution.
func parseGather(p []byte) (uint64, []byte, error) {
	d := Dec{B: p}
	seq := d.U64()
	data := d.Bytes()
	if err := d.End(); err != nil {
		return 0, nil, err
	}
	if len(data) > maxGatherBytes {
		return 0, nil, fmt.Errorf("an allgather contribution of %d bytes (at most %d)", len(data), maxGatherBytes)
	}
	return seq, data, nil
}

// gatherReplyLimit bounds the root's answer to an allgather of n ranks.
func gatherReplyLimit(n int) int {
	return int(min(int64(n)*(4+maxGatherBytes)+8, rootBudget))
}

// parseGatherReply reads the root's answer: seq and every rank's bytes.
func parseGatherReply(p []byte, n int) (uint64, [][]byte, error) {
	d := Dec{B: p}
	seq := d.U64()
	if d.Err != nil || len(d.B)/4 < n {
		return 0, nil, errShort
	}
	all := make([][]byte, n)
	for r := range all {
		all[r] = d.Bytes()
		if d.Err == nil && len(all[r]) > maxGatherBytes {
			return 0, nil, fmt.Errorf("rank %d's part of %d bytes (at most %d)", r, len(all[r]), maxGatherBytes)
		}
	}
	if err := d.End(); err != nil {
		return 0, nil, err
	}
	return seq, all, nil
}

func failPayload(err error) []byte {
	var e Enc
	e.U32(uint32(result.Of(err)))
	msg := err.Error()
	if len(msg) > MaxText {
		msg = msg[:MaxText]
	}
	e.Str(msg)
	return e.B
}

// parseFail reads a failure (frFail, frAbort). A peer chooses the code, so
// only an error code of ncclResult_t passes; anything else, or a frame
// that does not parse, is ncclRemoteError.
func parseFail(p []byte) (result.Code, string) {
	d := Dec{B: p}
	code := result.Code(d.U32())
	msg := d.StrMax(MaxText, "failure text")
	if d.End() != nil {
		return result.RemoteError, "a peer sent a malformed failure frame"
	}
	if code < result.UnhandledCudaError || code > result.RemoteError {
		code = result.RemoteError
	}
	return code, Clean(msg)
}
