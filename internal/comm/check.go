package comm

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/log"
	"cecoll/internal/memfd"
	"cecoll/internal/param"
	"cecoll/internal/peermem"
	"cecoll/internal/result"
)

// CECOLL_CHECK=1: the ranks of a multi-process communicator cross-check the
// signature of every collective without any host-side wait in the call.
// Rank 0 creates a board (a memfd, so nothing stays on the filesystem) of
// checkRing slots per rank and publishes it on its fd socket
// (internal/peermem) before its part of the init exchange; every other
// rank fetches and maps it once that exchange returned (checkStart,
// checkJoin). The ranks agree at init that they all check.
// A launch writes its descriptor into its slot for sequence s (s modulo
// the ring: a seqlock, written marks a whole slot); a watcher goroutine per
// rank compares each sequence once every rank has posted it, and a
// mismatch becomes an asynchronous ncclInvalidUsage naming both sides,
// with the engine aborted so the streams parked on the mismatched
// collective are released. A rank that runs more than the ring ahead of a
// watcher overwrites slots it has not read: the watcher says so (WARN,
// how many collectives went unchecked) rather than skipping them quietly.
//
// Sends and receives: the k-th send from a to b must match b's k-th
// receive from a in size (NCCL's contract; otherwise the pair's pieces
// and signals disagree: a hang, or a later receive taking the rest of
// the send). Each rank posts every transfer it issues, by its number
// (sendSeq, recvSeq), into the board's slot of the pair: a sender its
// bytes in the send half, a receiver in the receive half, both in the
// receiver's row, so the receiver's watcher compares them once both are
// posted, as it compares collectives, and the sender hears a mismatch
// through the abort. Under CHECK an empty transfer is posted too (one
// issued nowhere else), so an empty send meeting a receive of bytes is
// reported rather than shifting every later pair. Beyond p2pRanks ranks
// only collectives are checked (a WARN at init says so).

const (
	checkRing = 1024
	slotBytes = 64
	// p2pRing transfers per ordered pair of ranks, in slots of
	// p2pSlotBytes after the collectives' slots, on a communicator of at
	// most p2pRanks ranks (the pairs' slots grow as the square of the
	// ranks: 4 GiB of sparse memory at the most).
	p2pRing      = 128
	p2pSlotBytes = 32
	p2pRanks     = 1024
	// boardTag is the fd socket key of the board: never an allocation base.
	boardTag hip.DevicePtr = 1
)

// slot is one posted descriptor: written is 0 while the writer fills it,
// and set to 1 only after seq, so a reader that sees written 1 and its seq
// before and after reading the fields read one whole descriptor. The
// fields are atomic too: a seqlock's reader races the writer by design,
// and Go's memory model (and -race) wants such words atomic.
type slot struct {
	seq     atomic.Uint64
	fn      atomic.Int32
	dt      atomic.Int32
	root    atomic.Int32
	flags   atomic.Int32 // flagInPlace
	count   atomic.Uint64
	win     atomic.Int64 // registration index of the window holding the checked buffer, -1: none
	off     atomic.Uint64
	pad     [8]byte
	written atomic.Uint32
	_       uint32
}

// post writes v as the descriptor of seq.
func (s *slot) post(seq uint64, v sig) {
	s.written.Store(0)
	s.fn.Store(v.fn)
	s.dt.Store(v.dt)
	s.root.Store(v.root)
	s.flags.Store(v.flags)
	s.count.Store(v.count)
	s.win.Store(v.win)
	s.off.Store(v.off)
	s.seq.Store(seq)
	s.written.Store(1)
}

var _ [slotBytes - int(unsafe.Sizeof(slot{}))]byte
var _ [int(unsafe.Sizeof(slot{})) - slotBytes]byte

// p2pHalf is one side's post of a transfer: seq is 0 while its writer
// fills bytes (a seqlock, as slot).
type p2pHalf struct {
	seq   atomic.Uint64
	bytes atomic.Uint64
}

// p2pSlot is the k-th transfer from one rank to another: the sender's
// post and the receiver's.
type p2pSlot struct {
	send, recv p2pHalf
}

var _ [p2pSlotBytes - int(unsafe.Sizeof(p2pSlot{}))]byte
var _ [int(unsafe.Sizeof(p2pSlot{})) - p2pSlotBytes]byte

func (h *p2pHalf) post(seq uint64, bytes uintptr) {
	h.seq.Store(0)
	h.bytes.Store(uint64(bytes))
	h.seq.Store(seq)
}

// Results of p2pHalf.read.
const (
	halfNotYet = iota // not posted yet, or being written
	halfRead
	halfLost // overwritten by a later transfer of the pair
)

func (h *p2pHalf) read(seq uint64) (uint64, int) {
	s := h.seq.Load()
	b := h.bytes.Load()
	switch {
	case s == seq && h.seq.Load() == seq:
		return b, halfRead
	case s > seq:
		return 0, halfLost
	}
	return 0, halfNotYet
}

type checkBoard struct {
	mem   []byte
	n     int
	next  uint64 // sequences posted by this rank (launch order)
	lostN uint64 // collectives the watcher could not compare (lost)
	lostP uint64 // transfers the watcher could not compare
	p2p   bool   // the board has the transfers' slots (n <= p2pRanks)

	mu     sync.RWMutex // the watcher reads under R; unmap takes W
	closed bool
}

func checkEnabled() bool { return param.Check.Get() }

func (b *checkBoard) at(rank int, seq uint64) *slot {
	i := (uint64(rank)*checkRing + seq%checkRing) * slotBytes
	return (*slot)(unsafe.Pointer(&b.mem[i]))
}

// p2pAt is the slot of the seq-th transfer from rank from to rank to.
func (b *checkBoard) p2pAt(from, to int, seq uint64) *p2pSlot {
	n := uint64(b.n)
	i := uint64(n)*checkRing*slotBytes + ((uint64(to)*n+uint64(from))*p2pRing+seq%p2pRing)*p2pSlotBytes
	return (*p2pSlot)(unsafe.Pointer(&b.mem[i]))
}

// checkStart is rank 0's part of CECOLL_CHECK before the init exchange:
// it makes the board and publishes it for the id's secret, so that every
// peer finds it once the exchange returned (checkJoin).
func (c *Comm) checkStart() error {
	if c.node == nil || !checkEnabled() || c.rank != 0 {
		return nil
	}
	fd, err := memfd.Create("cecoll-check", boardBytes(c.size))
	if err != nil {
		return result.Errorf(result.SystemError, "CECOLL_CHECK: board: %w", err)
	}
	peermem.PublishFD(c.node.boot.Secret(), boardTag, fd)
	c.node.boardFD = fd
	return nil
}

// boardBytes is the size of the board of n ranks.
func boardBytes(n int) int64 {
	b := int64(n) * checkRing * slotBytes
	if n <= p2pRanks {
		b += int64(n) * int64(n) * p2pRing * p2pSlotBytes
	}
	return b
}

// mapBoard maps the board; fd comes from rank 0's process, so it must be a
// memfd sealed at no less than the board's size.
func mapBoard(fd, n int) (*checkBoard, error) {
	if err := memfd.Check(fd, boardBytes(n)); err != nil {
		return nil, result.Errorf(result.RemoteError, "CECOLL_CHECK: rank 0's board: %w", err)
	}
	m, err := syscall.Mmap(fd, 0, int(boardBytes(n)), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, result.Errorf(result.SystemError, "CECOLL_CHECK: map board: %w", err)
	}
	return &checkBoard{mem: m, n: n, p2p: n <= p2pRanks}, nil
}

// checkJoin, after the init exchange: every rank maps rank 0's board and
// starts its watcher.
func (c *Comm) checkJoin() error {
	if c.node == nil || !checkEnabled() {
		return nil
	}
	b := c.node.boot
	var fd int
	var err error
	if c.rank == 0 {
		fd, err = syscall.Dup(c.node.boardFD)
	} else {
		fd, err = peermem.Fetch(b.Peer(0).Sock, b.Secret(), boardTag, time.Now().Add(b.Wait()))
	}
	if err != nil {
		return result.Errorf(result.SystemError, "CECOLL_CHECK: rank %d: getting rank 0's board: %w", c.rank, err)
	}
	defer syscall.Close(fd)
	board, err := mapBoard(fd, c.size)
	if err != nil {
		return err
	}
	c.node.board = board
	if !board.p2p && c.rank == 0 {
		log.Warnf("CECOLL_CHECK: %d ranks: sends and receives are not checked above %d ranks, only collectives", c.size, p2pRanks)
	}
	go c.checkWatch(board, c.node.stopWatch)
	return nil
}

// checkPost writes this rank's descriptor of the collective being launched.
// c.engMu held (launch order is the sequence order). Allocation-free.
func (c *Comm) checkPost(a *ce.Args) {
	if c.node == nil || c.node.board == nil {
		return
	}
	bd := c.node.board
	bd.next++
	v := sig{fn: int32(a.Func), dt: a.Datatype, root: int32(a.Root), count: uint64(a.Count), win: -1}
	p, flags := symmetricPointer(a, c.rank)
	if st, err := c.rt.StreamGetCaptureStatus(a.Stream); err == nil && st == hip.CaptureActive {
		flags |= flagCaptured
	}
	v.flags = flags
	if w, ok := c.FindWindow(p, 1); ok {
		if cw, ok := w.(*Window); ok {
			v.win, v.off = c.windowIndex(cw), uint64(p-cw.base)
		}
	}
	bd.at(c.rank, bd.next).post(bd.next, v)
}

// checksP2P reports whether c posts its transfers (CECOLL_CHECK).
func (c *Comm) checksP2P() bool { return c.node != nil && c.node.board != nil && c.node.board.p2p }

// checkPostP2P posts transfer t, the seq-th of its direction with its
// peer, for the receiver's watcher. Allocation-free; nothing without
// CECOLL_CHECK.
func (c *Comm) checkPostP2P(t *ce.Transfer, seq uint64) {
	if !c.checksP2P() {
		return
	}
	b := c.node.board
	if t.Recv {
		b.p2pAt(t.Peer, c.rank, seq).recv.post(seq, t.Bytes)
	} else {
		b.p2pAt(c.rank, t.Peer, seq).send.post(seq, t.Bytes)
	}
}

// symmetricPointer is the buffer of a whose window decides the path on
// every rank (its row's Decides, ce op.go), and the form's flags where the
// peers' plans depend on this rank's form (Op.FormShared: every rank's
// in-place AlltoAll swaps instead of pushing; a rooted root in place finds
// peer r's block at its own block's offset plus (r-root)*count, where out
// of place it finds it at the same offset). A non-root's other buffer is
// ignored by NCCL's contract (it may be NULL, or anything): nothing of it
// is compared.
func symmetricPointer(a *ce.Args, rank int) (hip.DevicePtr, int32) {
	o := ce.OpOf(a.Func)
	p, _ := o.Deciding(a, 0)
	if o.FormShared(rank, a.Root) && o.InPlace(a, rank) {
		return p, flagInPlace
	}
	return p, 0
}

// windowIndex is w's registration number, the same on every rank.
func (c *Comm) windowIndex(w *Window) int64 {
	c.node.mu.Lock()
	defer c.node.mu.Unlock()
	if i, ok := c.node.winIndex[w]; ok {
		return i
	}
	return -1
}

// Flags of a descriptor: the in-place form (AlltoAll, Scatter, Gather),
// and a call under stream capture (graph and eager calls sync through
// different flag words, so every rank must capture a call or none).
const (
	flagInPlace  = 1
	flagCaptured = 2
)

type sig struct {
	fn, dt, root int32
	flags        int32
	count        uint64
	win          int64
	off          uint64
}

// read returns rank's descriptor of seq, ok false while not (or no longer)
// there.
func (b *checkBoard) read(rank int, seq uint64) (sig, bool) {
	s := b.at(rank, seq)
	if s.seq.Load() != seq || s.written.Load() != 1 {
		return sig{}, false
	}
	v := sig{fn: s.fn.Load(), dt: s.dt.Load(), root: s.root.Load(), flags: s.flags.Load(),
		count: s.count.Load(), win: s.win.Load(), off: s.off.Load()}
	if s.seq.Load() != seq || s.written.Load() != 1 {
		return sig{}, false
	}
	return v, true
}

func (v sig) String() string {
	w := "unregistered"
	if v.win >= 0 {
		w = fmt.Sprintf("window #%d offset %d", v.win, v.off)
	}
	ip := ""
	if v.flags&flagInPlace != 0 {
		ip = " in place"
	}
	if v.flags&flagCaptured != 0 {
		ip += " captured"
	}
	root := ""
	if ce.Func(v.fn).Rooted() {
		root = fmt.Sprintf(" root %d", v.root)
	}
	return fmt.Sprintf("%s%s count %d %s%s, %s", ce.Func(v.fn), ip, v.count, ce.TypeName(v.dt), root, w)
}

// sameCall reports whether v and o are the same call (function, count,
// datatype, root, capture), so that a mismatch is one of buffers.
func (v sig) sameCall(o sig) bool {
	return v.fn == o.fn && v.count == o.count && v.dt == o.dt && v.flags&flagCaptured == o.flags&flagCaptured &&
		(!ce.Func(v.fn).Rooted() || v.root == o.root)
}

// mismatch compares what must agree between rank vr's descriptor v and
// rank or's o: the call, its capture, and whether the deciding buffer
// (symmetricPointer) lies in a window on both, the same one (one rank
// would go zero-copy into the other's window while that one waits for
// staged data: NCCL's symmetric-registration contract is broken), at the
// offsets the plan assumes: the same on every rank, but for the root of a
// rooted call in place, whose peer r's block lies (r-root)*count after
// its own. Only the root copies a rooted call, so two non-roots compare
// nothing of their offsets; and the form matters only on the window path
// (staged blocks go through the staging windows whatever the layout).
func (v sig) mismatch(vr int, o sig, or int) bool {
	if !v.sameCall(o) {
		return true
	}
	if (v.win >= 0) != (o.win >= 0) {
		return true
	}
	if v.win < 0 {
		return false
	}
	if v.win != o.win {
		return true
	}
	if !ce.Func(v.fn).Rooted() {
		return v.off != o.off || v.flags&flagInPlace != o.flags&flagInPlace
	}
	root, peer, rootSig, peerSig := vr, or, v, o
	switch int(v.root) {
	case vr:
	case or:
		root, peer, rootSig, peerSig = or, vr, o, v
	default:
		return false // two non-roots
	}
	want := rootSig.off
	if rootSig.flags&flagInPlace != 0 {
		chunk := v.count * uint64(ce.TypeSize(v.dt))
		want += uint64(peer-root) * chunk // the in-place layout's block of peer
	}
	return peerSig.off != want
}

func (c *Comm) checkWatch(b *checkBoard, stop <-chan struct{}) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	next := uint64(1)
	nextP := make([]uint64, b.n) // by peer: the next receive from it to compare
	for q := range nextP {
		nextP[q] = 1
	}
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		b.mu.RLock()
		if b.closed {
			b.mu.RUnlock()
			return
		}
		err := c.checkScan(b, &next)
		if err == nil && b.p2p {
			err = c.checkScanP2P(b, nextP)
		}
		b.mu.RUnlock()
		if err != nil {
			// Peers learn it through the bootstrap too (before any
			// ncclCommAbort of ours could tell them less).
			c.node.boot.Abort(err)
			c.fail(err) // logs it
			return
		}
	}
}

// checkScan compares every sequence all ranks have posted.
func (c *Comm) checkScan(b *checkBoard, next *uint64) error {
	for {
		seq := *next
		mine, ok := b.read(c.rank, seq)
		if !ok {
			if b.at(c.rank, seq).seq.Load() > seq {
				b.lost(c.rank, seq)
				*next++
				continue
			}
			return nil
		}
		for r := range b.n {
			if r == c.rank {
				continue
			}
			theirs, ok := b.read(r, seq)
			if !ok {
				if b.at(r, seq).seq.Load() > seq {
					b.lost(c.rank, seq) // rank r ran a ring ahead
					continue
				}
				return nil // not posted yet
			}
			if mine.mismatch(c.rank, theirs, r) {
				why := "differs between ranks"
				if mine.sameCall(theirs) {
					why = "breaks NCCL's symmetric-registration contract (every rank passes its buffer at the same offset of one NCCL_WIN_COLL_SYMMETRIC window, or none does; a rooted call in place: rank r's block at buf + r*count)"
				}
				return result.Errorf(result.InvalidUsage, "CECOLL_CHECK: collective #%d %s: rank %d issued %v; rank %d issued %v", seq, why, c.rank, mine, r, theirs)
			}
		}
		*next++
	}
}

// checkScanP2P compares, peer by peer, every receive of this rank with
// its send, as far as both are posted.
func (c *Comm) checkScanP2P(b *checkBoard, next []uint64) error {
	for q := range b.n {
		for {
			seq := next[q]
			s := b.p2pAt(q, c.rank, seq)
			mine, st := s.recv.read(seq)
			var theirs uint64
			if st == halfRead {
				theirs, st = s.send.read(seq)
			}
			if st == halfNotYet {
				break
			}
			next[q]++
			if st == halfLost {
				b.lostP++
				if b.lostP%1000 == 1 {
					log.Warnf("rank %d: CECOLL_CHECK lost track of receive #%d from rank %d (%d so far): more than %d transfers of the pair ahead of this rank's check; they were not compared", c.rank, seq, q, b.lostP, p2pRing)
				}
				continue
			}
			if mine != theirs {
				return result.Errorf(result.InvalidUsage,
					"CECOLL_CHECK: rank %d's receive #%d from rank %d is %d bytes, rank %d's send #%d to rank %d is %d bytes (NCCL's contract: the k-th ncclSend from a to b and b's k-th ncclRecv from a agree on count and datatype)",
					c.rank, seq, q, mine, q, seq, c.rank, theirs)
			}
		}
	}
	return nil
}

// lost reports (WARN, at most every thousandth time) a collective that a
// rank's watcher could not compare: a rank ran more than checkRing
// collectives ahead of it and overwrote the slot.
func (b *checkBoard) lost(rank int, seq uint64) {
	b.lostN++
	if b.lostN%1000 == 1 {
		log.Warnf("rank %d: CECOLL_CHECK lost track of collective #%d (%d so far): a rank ran more than %d collectives ahead of this rank's check; they were not compared", rank, seq, b.lostN, checkRing)
	}
}

// closeCheck unmaps the board (after the watcher stopped reading it).
func (c *Comm) closeCheck() {
	if c.node == nil {
		return
	}
	if fd := c.node.boardFD; fd >= 0 {
		peermem.Unpublish(c.node.boot.Secret().Key, boardTag)
		syscall.Close(fd)
		c.node.boardFD = -1
	}
	b := c.node.board
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	syscall.Munmap(b.mem)
}
