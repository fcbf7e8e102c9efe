package comm

import (
	"math/bits"
	"runtime"
	"slices"

	"cecoll/internal/ce"
	"cecoll/internal/forward"
	"cecoll/internal/hip"
	"cecoll/internal/osthread"
	"cecoll/internal/result"
)

// Point-to-point (ncclSend, ncclRecv). The engine runs a rank's batch of
// transfers as one call (ce p2p.go); this file makes the batches. Alone,
// a send or receive is a batch of one. In a group, every transfer of a
// communicator is deferred and the group's transfers of each communicator
// form one batch, run after the group's collectives. The k-th send from a
// to b matches b's k-th receive from a: sendSeq and recvSeq count them per
// peer on each rank, so a pair whose both sides are in one group of this
// process is found by its numbers (the send then copies straight into the
// receive's buffer), whatever either issued before.

// The point-to-point operations.
const (
	FuncSend = ce.FuncSend
	FuncRecv = ce.FuncRecv
)

// pendingP2P is a transfer deferred to its group's end.
type pendingP2P struct {
	c   *Comm
	seq uint64 // its number in its direction with its peer (see the top)
	t   ce.Transfer
	s   hip.Stream
}

// P2P issues one send (fn FuncSend) or receive (FuncRecv) of count
// elements of dt with peer, on s.
func (c *Comm) P2P(fn Func, buf hip.DevicePtr, count uintptr, dt int32, peer int, s hip.Stream) error {
	if err := c.failedAsync(fn.String()); err != nil {
		return err
	}
	if err := provided(fn); err != nil {
		return err
	}
	if c.noCE != "" {
		return result.Errorf(result.InvalidUsage, "%s: %s", fn, c.noCE)
	}
	t, err := c.checkP2P(fn, buf, count, dt, peer)
	if err != nil {
		return c.Refuse(err)
	}
	if t.Bytes == 0 {
		switch {
		case c.checksP2P(): // CECOLL_CHECK compares it with its match all the same (check.go)
			c.checkPostP2P(&t, c.countP2P(&t))
		case c.node == nil && checkEnabled():
			// One process's ranks (no check board) under CECOLL_CHECK:
			// numbered on every rank alike, and in a group compared with
			// its match there (matchP2P), so an empty receive against a
			// send is refused rather than left waiting.
			seq := c.countP2P(&t)
			if g := currentGroup(); g != nil {
				g.p2ps = append(g.p2ps, pendingP2P{c: c, seq: seq, t: t, s: s})
			}
		}
		return nil // no piece, no signal: both sides skip it alike (NCCL: the sizes agree)
	}
	seq := c.countP2P(&t)
	c.checkPostP2P(&t, seq)
	if g := currentGroup(); g != nil {
		if st := c.state(); st != stReady && st != stInit {
			return c.Refuse(c.usable(fn.String()))
		}
		g.p2ps = append(g.p2ps, pendingP2P{c: c, seq: seq, t: t, s: s})
		return nil
	}
	if err := c.usable(fn.String()); err != nil {
		return c.Refuse(err)
	}
	if peer == c.rank {
		return c.Refuse(result.Errorf(result.InvalidUsage,
			"%s: a transfer with this rank itself needs its match (its %s) in the same ncclGroupStart/End", fn, matchName(fn)))
	}
	if err := c.claim(s, p2pMark, nil); err != nil {
		c.fail(err) // as claimStream: the other rank's part waits for this one
		return err
	}
	c.engMu.Lock()
	defer c.engMu.Unlock()
	c.one[0] = t
	c.args = ce.Args{Func: ce.FuncSendRecv, Stream: s, P2P: c.one[:]}
	return c.runBatchLocked()
}

func matchName(fn Func) string {
	if fn == FuncSend {
		return "ncclRecv"
	}
	return "ncclSend"
}

// checkP2P validates one rank's arguments as NCCL's argcheck does.
func (c *Comm) checkP2P(fn Func, buf hip.DevicePtr, count uintptr, dt int32, peer int) (ce.Transfer, error) {
	elt := ce.TypeSize(dt)
	if elt == 0 {
		return ce.Transfer{}, result.Errorf(result.InvalidArgument, "%s: unknown datatype %d (nccl.h's are 0 to %d)", fn, dt, ce.NumTypes-1)
	}
	if peer < 0 || peer >= c.size {
		return ce.Transfer{}, result.Errorf(result.InvalidArgument, "%s: peer %d out of range [0, %d)", fn, peer, c.size)
	}
	hi, bytes := bits.Mul64(uint64(count), uint64(elt))
	if hi != 0 || bytes > uint64(^uintptr(0)>>1) {
		return ce.Transfer{}, result.Errorf(result.InvalidArgument, "%s: count %d of %s overflows", fn, count, ce.TypeName(dt))
	}
	if bytes > 0 && buf == 0 {
		what := "sendbuff"
		if fn == FuncRecv {
			what = "recvbuff"
		}
		return ce.Transfer{}, result.Errorf(result.InvalidArgument, "%s: %s is NULL", fn, what)
	}
	return ce.Transfer{Recv: fn == FuncRecv, Peer: peer, Buf: buf, Bytes: uintptr(bytes)}, nil
}

// countP2P numbers t in its direction with its peer.
func (c *Comm) countP2P(t *ce.Transfer) uint64 {
	n := &c.sendSeq[t.Peer]
	if t.Recv {
		n = &c.recvSeq[t.Peer]
	}
	*n++
	return *n
}

// runBatchLocked prepares c.args (a batch) and runs its steps; c.engMu
// held.
func (c *Comm) runBatchLocked() error {
	cur, err := c.rt.GetDevice()
	if err != nil {
		return result.Errorf(result.UnhandledCudaError, "current device: %w", err)
	}
	if cur != c.dev {
		defer c.rt.SetDevice(cur)
	}
	pr, err := c.prepareLocked(&c.args)
	if err != nil {
		return c.Refuse(err)
	}
	for k := range pr.Steps {
		if err := c.stepLocked(ce.FuncSendRecv, k); err != nil {
			return err
		}
	}
	return nil
}

// p2pMark in world.streams: this rank issued an ungrouped transfer on the
// stream (above every collective's number, so claimStream refuses another
// rank's collective there too).
const p2pMark = ^uint64(0)

// p2pMember is one communicator's batch in a group: its transfers and
// their numbers in group.xfers and group.xseq, its streams other than its
// first transfer's in group.joins.
type p2pMember struct {
	c        *Comm
	set      int // its world's set in the group
	lo, hi   int
	jlo, jhi int
	steps    int
	err      error // its pairs broke the contract (matchP2P)
}

// p2pSetKey names a world of this process in a group (c: a communicator
// with no world, the only rank of its process).
type p2pSetKey struct {
	w *world
	c *Comm
}

func setKeyOf(c *Comm) p2pSetKey {
	if c.w != nil {
		return p2pSetKey{w: c.w}
	}
	return p2pSetKey{c: c}
}

// pairKey names the seq-th transfer from rank from to rank to of a set.
type pairKey struct {
	set      int
	from, to int
	seq      uint64
}

// launchP2P runs the group's transfers: per world of this process, every
// communicator's batch, prepared all before any step, then their steps
// interleaved (step k of every member before step k+1 of any), as runSet
// does for a collective's set, and for its reasons.
func (g *group) launchP2P() []error {
	ps := g.p2ps
	g.psets = g.psets[:0]
	clear(g.pindex)
	g.porder = g.porder[:0]
	for i := range ps {
		k := setKeyOf(ps[i].c)
		if _, ok := g.pindex[k]; !ok {
			g.pindex[k] = len(g.pindex)
		}
		g.psets = append(g.psets, g.pindex[k])
		g.porder = append(g.porder, i)
	}
	// Members by set, then rank; each member's transfers in issue order.
	slices.SortStableFunc(g.porder, func(x, y int) int {
		if g.psets[x] != g.psets[y] {
			return g.psets[x] - g.psets[y]
		}
		return ps[x].c.rank - ps[y].c.rank
	})
	g.xfers, g.xseq, g.xs, g.joins, g.pm = g.xfers[:0], g.xseq[:0], g.xs[:0], g.joins[:0], g.pm[:0]
	for _, i := range g.porder {
		p := &ps[i]
		if len(g.pm) == 0 || g.pm[len(g.pm)-1].c != p.c {
			g.pm = append(g.pm, p2pMember{c: p.c, set: g.psets[i], lo: len(g.xfers), hi: len(g.xfers), jlo: len(g.joins), jhi: len(g.joins)})
		}
		m := &g.pm[len(g.pm)-1]
		if m.hi > m.lo && p.s != g.xstream(m) && !slices.Contains(g.joins[m.jlo:m.jhi], p.s) {
			g.joins = append(g.joins, p.s)
			m.jhi++
		}
		g.xfers, g.xseq, g.xs = append(g.xfers, p.t), append(g.xseq, p.seq), append(g.xs, p.s)
		m.hi++
	}
	g.matchP2P()
	var errs []error
	cur, err := ps[0].c.rt.GetDevice()
	if err != nil {
		return append(errs, result.Errorf(result.UnhandledCudaError, "current device: %w", err))
	}
	defer ps[0].c.rt.SetDevice(cur)
	for lo := 0; lo < len(g.pm); {
		hi := lo + 1
		for hi < len(g.pm) && g.pm[hi].set == g.pm[lo].set {
			hi++
		}
		errs = g.runP2PSet(g.pm[lo:hi], errs)
		lo = hi
	}
	return errs
}

// xstream is the stream of member m's first transfer: its batch's.
func (g *group) xstream(m *p2pMember) hip.Stream { return g.xs[m.lo] }

// matchP2P finds the pairs whose both sides are in this group (one set,
// by their numbers) and points each at the other's buffer: the send then
// copies straight into the receive's. A pair whose sizes differ breaks
// NCCL's contract: the receiving member's batch is refused (and its world
// fails: Refuse).
func (g *group) matchP2P() {
	clear(g.sends)
	for _, m := range g.pm {
		for i := m.lo; i < m.hi; i++ {
			if t := &g.xfers[i]; !t.Recv {
				g.sends[pairKey{m.set, m.c.rank, t.Peer, g.xseq[i]}] = i
			}
		}
	}
	for mi := range g.pm {
		m := &g.pm[mi]
		for i := m.lo; i < m.hi; i++ {
			t := &g.xfers[i]
			if !t.Recv {
				continue
			}
			j, ok := g.sends[pairKey{m.set, t.Peer, m.c.rank, g.xseq[i]}]
			if !ok {
				continue
			}
			s := &g.xfers[j]
			if s.Bytes != t.Bytes { // first: an in-place pair stages on sizes that must agree too
				m.err = result.Errorf(result.InvalidUsage,
					"ncclRecv: rank %d's receive #%d from rank %d is %d bytes, the matching ncclSend %d bytes (NCCL's contract: count and datatype agree)",
					m.c.rank, g.xseq[i], t.Peer, t.Bytes, s.Bytes)
				continue
			}
			if t.Peer != m.c.rank && g.overlapsSend(m, t) {
				// In place (nccl-tests' sendrecv): this rank still reads
				// the buffer for its own send, so the peer may not write
				// it at will; staged, the engine orders the two (ce
				// p2p.go, inPlaceOK). Both sides stage: neither is marked.
				continue
			}
			t.PeerBuf, s.PeerBuf = s.Buf, t.Buf
		}
	}
}

// overlapsSend reports whether receive t of member m shares bytes with a
// send of m's batch.
func (g *group) overlapsSend(m *p2pMember, t *ce.Transfer) bool {
	for i := m.lo; i < m.hi; i++ {
		x := &g.xfers[i]
		if !x.Recv && x.Bytes > 0 && x.Buf < t.Buf+hip.DevicePtr(t.Bytes) && t.Buf < x.Buf+hip.DevicePtr(x.Bytes) {
			return true
		}
	}
	return false
}

// queuesFit refuses a group of transfers whose streams (each waits for
// the engine's end, holding a hardware queue) would fill the queues left
// to this rank (callStreams): the GPU would stop, the releasing writes
// included.
func (c *Comm) queuesFit(streams int) error {
	if c.callStreams == 0 || streams <= c.callStreams {
		return nil
	}
	return result.Errorf(result.InvalidUsage,
		"ncclGroupEnd: rank %d's sends and receives of this group are on %d streams, and each waits for the transfers, holding one of the GPU's hardware queues; of its process's %d queues (CUDA_DEVICE_MAX_CONNECTIONS), shared with its copy engines' streams and those of the process's other ranks on device %d, a rank's group may use at most %d, or the GPU would stall. Use fewer streams, or raise CUDA_DEVICE_MAX_CONNECTIONS before the process first uses CUDA",
		c.rank, streams, c.queues, c.dev, c.callStreams)
}

// runP2PSet prepares every member's batch, then runs their steps
// interleaved. Members are in rank order, and are locked in it (see
// runSet).
func (g *group) runP2PSet(ms []p2pMember, errs []error) []error {
	for i := range ms {
		ms[i].c.engMu.Lock()
	}
	defer func() {
		for i := range ms {
			ms[i].c.engMu.Unlock()
		}
	}()
	most := 0
	for i := range ms {
		m := &ms[i]
		err := m.err
		if err == nil {
			err = m.c.usable("ncclGroupEnd")
		}
		if err == nil {
			if err = g.claimP2P(ms, m); err != nil {
				m.c.fail(err) // as claimStream
				return append(errs, err)
			}
		}
		if err == nil {
			err = m.c.queuesFit(1 + m.jhi - m.jlo)
		}
		if err == nil {
			m.c.args = ce.Args{Func: ce.FuncSendRecv, Stream: g.xstream(m),
				P2P: g.xfers[m.lo:m.hi:m.hi], Joins: g.joins[m.jlo:m.jhi:m.jhi]}
			var pr ce.Prepared
			pr, err = m.c.prepareLocked(&m.c.args)
			m.steps = pr.Steps
		}
		if err != nil {
			// Nothing of the set is enqueued; its peers elsewhere may
			// have issued theirs: the world fails (Refuse).
			return append(errs, m.c.Refuse(err))
		}
		most = max(most, m.steps)
	}
	for k := range most {
		for i := range ms {
			if k < ms[i].steps {
				if err := ms[i].c.stepLocked(ce.FuncSendRecv, k); err != nil {
					return append(errs, err)
				}
			}
		}
	}
	return errs
}

// claimP2P claims member m's streams for its transfers (claim) against
// the ranks of this process outside its set ms.
func (g *group) claimP2P(ms []p2pMember, m *p2pMember) error {
	in := func(r int) bool {
		for i := range ms {
			if ms[i].c.rank == r {
				return true
			}
		}
		return false
	}
	if err := m.c.claim(g.xstream(m), p2pMark, in); err != nil {
		return err
	}
	for _, s := range g.joins[m.jlo:m.jhi] {
		if err := m.c.claim(s, p2pMark, in); err != nil {
			return err
		}
	}
	return nil
}

// keyOf is the stream s names on device dev: the NULL and per-thread
// streams are one per device (and per thread), so ranks on different
// devices never share them.
func keyOf(s hip.Stream, dev int) streamKey {
	key := streamKey{s: s}
	switch s {
	case hip.StreamLegacy:
		key.s, key.dev = hip.StreamNull, dev
	case hip.StreamNull:
		key.dev = dev
	case hip.StreamPerThread:
		key.tid, key.dev = osthread.ID(), dev
	}
	return key
}

func streamName(k streamKey) string {
	if k.s == hip.StreamNull {
		return "the NULL stream"
	}
	return "the same stream"
}

// AlltoAllv is RCCL's ncclAllToAllv: to each peer p, sendCounts[p]
// elements of dt from send + sDispls[p] elements; from each peer p,
// recvCounts[p] elements into recv + rDispls[p]. Each (sender, receiver)
// pair is a transfer whose count both sides know (the contract: a's
// sendCounts[b] is b's recvCounts[a]), so the call is one send and one
// receive per peer in one group (the caller's, when one is open), zero
// counts skipped by both sides alike. In forward mode each pair routes by
// its bytes alone, as a send does, so both sides choose alike: one call
// may move some pairs on copy engines and hand the others to the real
// library's ncclSend and ncclRecv, in the same group.
func (c *Comm) AlltoAllv(send hip.DevicePtr, sendCounts, sDispls []uintptr, recv hip.DevicePtr, recvCounts, rDispls []uintptr, dt int32, s hip.Stream) error {
	const call = "ncclAllToAllv"
	if err := c.failedAsync(call); err != nil {
		return err
	}
	elt := ce.TypeSize(dt)
	switch {
	case elt == 0:
		return c.Refuse(result.Errorf(result.InvalidArgument, "%s: unknown datatype %d (nccl.h's are 0 to %d)", call, dt, ce.NumTypes-1))
	case len(sendCounts) != c.size || len(sDispls) != c.size || len(recvCounts) != c.size || len(rDispls) != c.size:
		return c.Refuse(result.Errorf(result.InvalidArgument, "%s: a count or displacement array is NULL", call))
	}
	// GroupStart and GroupEnd are the calling thread's.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := GroupStart(); err != nil {
		return err
	}
	var first error
	for i := range 2 * c.size {
		peer, fn, buf, counts, displs := (c.rank+i/2)%c.size, FuncSend, send, sendCounts, sDispls
		if i%2 == 1 {
			fn, buf, counts, displs = FuncRecv, recv, recvCounts, rDispls
		}
		if counts[peer] == 0 {
			if c.checksP2P() { // as P2P's empty transfer
				t := ce.Transfer{Recv: fn == FuncRecv, Peer: peer}
				c.checkPostP2P(&t, c.countP2P(&t))
			}
			continue
		}
		hi, off := bits.Mul64(uint64(displs[peer]), uint64(elt))
		if hi != 0 || off > uint64(^uintptr(0)>>1) {
			first = c.Refuse(result.Errorf(result.InvalidArgument, "%s: displacement %d of %s for peer %d overflows", call, displs[peer], ce.TypeName(dt), peer))
			break
		}
		if buf != 0 {
			buf += hip.DevicePtr(off)
		}
		var err error
		if c.RouteCE(fn, buf, buf, counts[peer], dt, -1) {
			err = c.P2P(fn, buf, counts[peer], dt, peer, s)
		} else {
			err = c.forwardP2P(fn, buf, counts[peer], dt, peer, s)
		}
		if err != nil {
			first = err
			break
		}
	}
	if err := GroupEnd(); first == nil {
		first = err
	}
	return first
}

// forwardP2P hands one transfer to the real library's ncclSend or
// ncclRecv, on the real communicator.
func (c *Comm) forwardP2P(fn Func, buf hip.DevicePtr, count uintptr, dt int32, peer int, s hip.Stream) error {
	h := forward.Handle(c.Real())
	if fn == FuncSend {
		return c.lib.Send(uintptr(buf), count, dt, peer, h, uintptr(s))
	}
	return c.lib.Recv(uintptr(buf), count, dt, peer, h, uintptr(s))
}
