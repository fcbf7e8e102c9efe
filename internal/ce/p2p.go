package ce

import (
	"sync/atomic"

	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// Point-to-point. A call of FuncSendRecv is one rank's batch of transfers
// (Args.P2P): every send and receive this rank issued in one group (or
// one alone), to any peers, this rank included. The k-th send from a to b
// matches b's k-th receive from a, so the transfers between one pair in
// one direction form a channel: its transfers in issue order, cut into
// pieces. Both sides compute the same pieces from the same sizes (NCCL's
// contract: count and datatype agree), so they agree on every signal.
//
// A piece moves under two signals between the pair, both counters of the
// pair (never a sync of the whole communicator): credit (the receiver has
// room: its buffer is ready, or its staging half is free) and data (the
// piece has landed). The sender waits for a credit, copies the piece and
// signals data; the receiver waits for data, copies the piece out of its
// staging (staged pieces), and grants the next credit. A receiver grants
// two credits at its batch's start, then one after each piece it
// consumed while more are due, so two pieces are in flight per pair and
// the remote copy of one overlaps the local copy of the other.
//
// Where a piece lands (Transfer.PeerBuf): directly in the receiver's
// buffer when the sender knows it (both sides in one group of one
// process: one piece, no copy out), else in the receiver's staging window,
// in its slot of the sender (slotOf; two halves used in turn). A rank
// never stages a transfer with itself, so the window holds n-1 slots of
// stageSize/(n-1) bytes: the piece, which bounds the staged path's speed
// (docs/performance.md), is as large as the window allows.
//
// A batch runs as rounds: in round r every channel moves its piece r.
// Step i enqueues the sends of round i (their credit waits, copies, data
// signals), then the receives of round i-lag (data waits, copies out,
// credits), where lag is 1 in a batch of several rounds and 0 in one of
// a single round. A send waits only for credits granted at the peers'
// batch starts or by their receives two rounds before, and a receive
// only for sends of its round, which every rank enqueues a step earlier
// (or, lag 0, before it): no wait depends on one queued behind it on any
// rank's stream, so every batch of any pattern (a ring, all pairs, a
// pipeline) progresses. The lag lets a rank's send of piece r+1 go while
// its peer's piece r is still on the way in, instead of behind that
// piece's copy out.
//
// The receives run on the engine's side stream where it has one and no
// receive of the batch shares bytes with its sends (then a rank's remote
// copy and its local copy out overlap: two streams), on the work stream
// otherwise, in the order above.
//
// Eagerly a signal writes its direction's counter (the number of such
// signals so far, counted alike on both sides) into the peer's word, and
// a wait holds once the word has reached it (GEQ, nothing reset). Under
// capture a replay repeats its values, so each piece goes through one of
// two alternating halves of the direction (the halves of the staging
// slot's two pieces in flight), counted alike on both sides:
//   - every rank on one device: through an aligned 8-byte pair (credit,
//     data) in the receiver's window, as a collective's pairs (signal.go).
//     The receiver's credit writes (1, 0), the sender's data (0, 1): each
//     write zeroes the word its writer waits on next, and the two sides of
//     a pair strictly alternate (a credit goes only after the receiver saw
//     the data before it on that half, data only after its credit), so no
//     wait resets a word and a graph of transfers holds no write-value.
//   - otherwise: a copy of 1 into the peer's graph word of the half, which
//     its waiter resets after its wait. Each signal on a half is ordered
//     after the reset of the one before it there, within a replay and
//     across replays (a batch grants credits only after its previous batch
//     ended, and sends only on credits).
// Either way a channel needs no even count of signals (unlike a
// collective's syncs, B8).

// Transfer is one send or receive of a batch (Args.P2P).
type Transfer struct {
	Recv  bool
	Peer  int
	Buf   hip.DevicePtr
	Bytes uintptr
	// PeerBuf is the matching transfer's buffer at the peer when the
	// caller knows it (both sides in one group of this process): the send
	// then copies into it directly and its receive copies nothing. 0:
	// staged. A send to this rank always has it.
	PeerBuf hip.DevicePtr
}

// p2pCounters are a rank's counters of its pairs' signals, by peer.
// Launches change them under the engine's lock; Abort's release loop
// reads the wait counters.
type p2pCounters struct {
	dataSent, creditSent []uint32        // signals sent, by the peer they went to
	dataWait, creditWait []atomic.Uint32 // signals waited for, by the peer they come from
	// Under capture: the array of each direction's next signal.
	gDataTx, gDataRx, gCreditTx, gCreditRx []uint8
}

func (k *p2pCounters) init(n int) {
	k.dataSent, k.creditSent = make([]uint32, n), make([]uint32, n)
	k.dataWait, k.creditWait = make([]atomic.Uint32, n), make([]atomic.Uint32, n)
	k.gDataTx, k.gDataRx = make([]uint8, n), make([]uint8, n)
	k.gCreditTx, k.gCreditRx = make([]uint8, n), make([]uint8, n)
}

// channel is one direction of one pair in a batch: its pieces, and the
// transfer the rounds have reached.
type channel struct {
	pieces int // in the batch
	op     int // the transfer of the latest piece (index in the batch), -1: none yet
	off    int // pieces of that transfer moved so far
}

// p2pPlan is a prepared batch (in Engine.cur).
type p2pPlan struct {
	ops    []Transfer
	piece  uintptr   // bytes of a staged piece
	slot   uintptr   // bytes of a receiver's staging slot of one sender
	ch     []channel // ch[peer] sends to peer, ch[n+peer] receives from it; sized at Init
	joins  []hip.Stream
	rounds int
	lag    int        // the receives of step i are round i-lag's (top of the file)
	rs     hip.Stream // the receives' stream: es, or the side stream
	alone  bool       // no receive shares bytes with a send: rs may be the side stream
}

// p2p signal kinds.
const (
	sigData = iota
	sigCredit
)

// The words of a captured point-to-point pair (signal.go, p2pPairWord).
const (
	p2pCreditW = 0 // the receiver writes (1, 0): room for a piece
	p2pDataW   = 1 // the sender writes (0, 1): the piece landed
)

// init sizes the plan's scratch (Init: the launch path allocates nothing).
func (p *p2pPlan) init(n int) { p.ch = make([]channel, 2*n) }

func chanOf(t *Transfer, n int) int {
	if t.Recv {
		return n + t.Peer
	}
	return t.Peer
}

func opName(t *Transfer) string {
	if t.Recv {
		return "Recv"
	}
	return "Send"
}

// slotOf is the offset, in receiver r's staging window, of its slot of
// sender s != r: the senders after r in ring order, one slot each.
func (p *p2pPlan) slotOf(s, r, n int) uintptr {
	return uintptr((s-r-1+n)%n) * p.slot
}

// piecesOf is the pieces of transfer t.
func (p *p2pPlan) piecesOf(t *Transfer) int {
	switch {
	case t.Bytes == 0:
		return 0
	case t.PeerBuf != 0:
		return 1
	}
	return int((t.Bytes + p.piece - 1) / p.piece)
}

// prepareP2P validates and plans a batch (prepare, FuncSendRecv): the
// pieces of every channel, and the rounds they need.
func (e *Engine) prepareP2P(a *Args) error {
	c := &e.cur
	p := &c.p2p
	n := e.n
	p.ops, p.joins, p.rounds = a.P2P, a.Joins, 0
	p.slot = e.stageSize / uintptr(max(n-1, 1))
	p.piece = p.slot / 2
	if p.piece >= 256 {
		p.piece &^= 255
	}
	p.piece = max(p.piece, 1)
	for i := range p.ch {
		p.ch[i] = channel{op: -1}
	}
	for _, s := range a.Joins {
		// The batch joins every stream in and out, and a captured stream
		// can only join one captured too (and an eager one an eager one).
		st, err := e.rt.StreamGetCaptureStatus(s)
		if err != nil {
			return launchErr(FuncSendRecv, "capture status", err)
		}
		if (st == hip.CaptureActive) != c.capturing {
			return result.Errorf(result.InvalidUsage, "ce SendRecv: the group's transfers of this rank are on streams of which some are being captured and some not: capture them all, or none")
		}
	}
	for i := range a.P2P {
		t := &a.P2P[i]
		switch {
		case t.Peer < 0 || t.Peer >= n:
			return result.Errorf(result.InvalidArgument, "ce %s: peer %d out of range [0, %d)", opName(t), t.Peer, n)
		case t.Bytes > 0 && t.Buf == 0:
			return result.Errorf(result.InvalidArgument, "ce %s: buffer is NULL", opName(t))
		case t.Peer == e.rank && t.Bytes > 0 && t.PeerBuf == 0:
			return result.Errorf(result.InvalidUsage, "ce %s: a transfer with this rank itself needs its match (its receive, or its send) in the same group", opName(t))
		case t.Peer == e.rank:
			continue // the send makes the local copy (selfCopies)
		}
		if e.checkPtrs && t.Bytes > 0 {
			what := "sendbuff"
			if t.Recv {
				what = "recvbuff"
			}
			if err := e.checkPointer(FuncSendRecv, what, t.Buf, t.Bytes); err != nil {
				return err
			}
		}
		p.ch[chanOf(t, n)].pieces += p.piecesOf(t)
	}
	for i := range p.ch {
		p.rounds = max(p.rounds, p.ch[i].pieces)
	}
	var err error
	if p.alone, err = e.inPlaceOK(a.P2P); err != nil {
		return err
	}
	p.lag = 0
	if p.rounds > 1 {
		p.lag = 1
	}
	c.plan = plan{a: *a, kind: kindP2P, path: pathP2P, rounds: p.rounds, steps: max(p.rounds+p.lag, 1), per: 1}
	return nil
}

// inPlaceOK refuses a batch whose receive shares bytes with a send of it
// where copy engines cannot order the two. A send to this rank reads its
// buffer first (selfCopies), and a staged send of a peer's piece k reads
// it in its round, before that round's receives: a staged receive from
// the same address whose pieces come in the same rounds or later writes
// each piece only after the send read it (nccl-tests' in-place
// sendrecv). A receive from this rank that copies writes at the batch's
// start, and a direct one (the peer writes when it likes) at any time:
// neither may share bytes with a send. alone: no receive shares bytes
// with a send at all.
func (e *Engine) inPlaceOK(ts []Transfer) (alone bool, err error) {
	alone = true
	for i := range ts {
		t := &ts[i]
		if !t.Recv || t.Bytes == 0 || (t.Peer == e.rank && t.PeerBuf == t.Buf) {
			continue
		}
		for j := range ts {
			x := &ts[j]
			if !x.Recv && x.Bytes > 0 && overlaps(t, x) {
				alone = false
			}
			if x.Recv || x.Bytes == 0 || x.Peer == e.rank || !overlaps(t, x) {
				continue
			}
			if t.Peer != e.rank && t.PeerBuf == 0 && t.Buf == x.Buf && e.startRound(ts, j) <= e.startRound(ts, i) {
				continue
			}
			return false, result.Errorf(result.InvalidUsage,
				"ce SendRecv: the receive from rank %d shares bytes with the send to rank %d of the same group in a way copy engines cannot order (in place, a send and a receive start at one address, each the first of its peer's in the group)",
				t.Peer, x.Peer)
		}
	}
	return alone, nil
}

func overlaps(a, b *Transfer) bool {
	return a.Buf < b.Buf+hip.DevicePtr(b.Bytes) && b.Buf < a.Buf+hip.DevicePtr(a.Bytes)
}

// startRound is the round of transfer i's first piece: the pieces of the
// transfers before it on its channel.
func (e *Engine) startRound(ts []Transfer, i int) int {
	p := &e.cur.p2p
	r := 0
	for j := range i {
		if chanOf(&ts[j], e.n) == chanOf(&ts[i], e.n) && ts[j].Peer != e.rank {
			r += p.piecesOf(&ts[j])
		}
	}
	return r
}

// next moves channel idx of this rank (not its self channel) to its next
// piece: the transfer it belongs to and its byte range (-1: none left,
// which the rounds never ask for: they stop at the channel's pieces).
func (e *Engine) next(idx int) (op int, off, l uintptr) {
	p := &e.cur.p2p
	ch := &p.ch[idx]
	for {
		if ch.op >= 0 && ch.op < len(p.ops) && ch.off < p.piecesOf(&p.ops[ch.op]) {
			t := &p.ops[ch.op]
			o := uintptr(ch.off) * p.piece
			ch.off++
			if t.PeerBuf != 0 {
				return ch.op, 0, t.Bytes
			}
			return ch.op, o, min(p.piece, t.Bytes-o)
		}
		i := ch.op + 1 // the channel's next transfer, in issue order
		for i < len(p.ops) && (chanOf(&p.ops[i], e.n) != idx || p.ops[i].Peer == e.rank) {
			i++
		}
		if i >= len(p.ops) {
			ch.op, ch.off = len(p.ops), 0
			return -1, 0, 0
		}
		ch.op, ch.off = i, 0
	}
}

// p2pStep enqueues phase `phase` of step i of the batch: phase 0 the
// sends of round i on s, phase 1 the receives of round i-lag on p.rs (see
// the top of the file).
func (e *Engine) p2pStep(s hip.Stream, i, phase int) error {
	p := &e.cur.p2p
	if phase == 0 && i == 0 {
		if err := e.p2pStart(s); err != nil {
			return err
		}
	}
	if r := i - p.lag; phase == 1 && r >= 0 {
		return e.p2pRecvs(p.rs, r)
	}
	if phase == 0 && i < p.rounds {
		return e.p2pSends(s, i)
	}
	return nil
}

// p2pStart begins a batch on s: the sends to this rank, then the receives'
// stream (forked from s after them: they write receive buffers), then the
// receives' first credits, two per channel (the slot's halves).
func (e *Engine) p2pStart(s hip.Stream) error {
	c := &e.cur
	p := &c.p2p
	e.ops = e.ops[:0]
	e.cp.reset()
	if err := e.selfCopies(s); err != nil {
		return err
	}
	p.rs = s
	if p.alone && p.lag > 0 && e.side != 0 {
		if err := e.rt.EventRecord(e.fork, s); err != nil {
			return err
		}
		if err := e.rt.StreamWaitEvent(e.side, e.fork); err != nil {
			return err
		}
		p.rs, c.side = e.side, true // joinOut joins it back
	}
	for q := range e.n {
		for range min(2, p.ch[e.n+q].pieces) {
			if err := e.p2pSignal(p.rs, sigCredit, q); err != nil {
				return err
			}
		}
	}
	return e.submit(p.rs)
}

// p2pSends enqueues round r's sends on s: the credit waits, the copies
// (into the receiver's buffer, or its staging half r%2), the data signals.
func (e *Engine) p2pSends(s hip.Stream, r int) error {
	p := &e.cur.p2p
	n, me := e.n, e.rank
	e.ops = e.ops[:0]
	e.cp.reset()
	for q := range n {
		if r < p.ch[q].pieces {
			e.p2pWait(sigCredit, q)
		}
	}
	e.resetWaits()
	e.cp.seg(segStage1)
	for q := range n {
		if r >= p.ch[q].pieces {
			continue
		}
		op, off, l := e.next(q)
		if op < 0 || l == 0 {
			continue
		}
		t := &p.ops[op]
		dst := t.PeerBuf + hip.DevicePtr(off)
		if t.PeerBuf == 0 {
			dst = e.stageWin.PeerBase(q) + hip.DevicePtr(p.slotOf(me, q, n)+uintptr(r%2)*p.piece)
		}
		e.cp.add(dst, t.Buf+hip.DevicePtr(off), l)
	}
	if err := e.submit(s); err != nil {
		return err
	}
	if err := e.copySeg(s, segStage1, segStage1); err != nil {
		return err
	}
	for q := range n { // after the copies, in stream order: the piece has landed
		if r < p.ch[q].pieces {
			if err := e.p2pSignal(s, sigData, q); err != nil {
				return err
			}
		}
	}
	return e.submit(s)
}

// p2pRecvs enqueues round r's receives on s: the data waits, the copies
// out of the staging half r%2, the credits for pieces r+2.
func (e *Engine) p2pRecvs(s hip.Stream, r int) error {
	p := &e.cur.p2p
	n := e.n
	e.ops = e.ops[:0]
	e.cp.reset()
	for q := range n {
		if r < p.ch[n+q].pieces {
			e.p2pWait(sigData, q)
		}
	}
	e.resetWaits()
	e.cp.seg(segStage1)
	for q := range n {
		if r >= p.ch[n+q].pieces {
			continue
		}
		op, off, l := e.next(n + q)
		if op < 0 || l == 0 || p.ops[op].PeerBuf != 0 {
			continue // none, or one the sender copied into place
		}
		src := e.stageBase + hip.DevicePtr(p.slotOf(q, e.rank, n)+uintptr(r%2)*p.piece) // the half piece r used
		e.cp.add(p.ops[op].Buf+hip.DevicePtr(off), src, l)
	}
	if err := e.submit(s); err != nil {
		return err
	}
	if err := e.copySeg(s, segStage1, segStage1); err != nil {
		return err
	}
	for q := range n {
		if r+2 < p.ch[n+q].pieces { // the credit for piece r+2, into the half r freed
			if err := e.p2pSignal(s, sigCredit, q); err != nil {
				return err
			}
		}
	}
	return e.submit(s)
}

// selfCopies copies every send to this rank into its receive's buffer,
// before anything else of the batch (one copy each, on s).
func (e *Engine) selfCopies(s hip.Stream) error {
	for i := range e.cur.p2p.ops {
		t := &e.cur.p2p.ops[i]
		if t.Peer == e.rank && !t.Recv && t.Bytes > 0 && t.PeerBuf != t.Buf {
			if err := e.rt.MemcpyAsync(t.PeerBuf, t.Buf, t.Bytes, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// p2pSignal signals kind to peer q (data: a piece landed; credit: room
// for one): eagerly the direction's next count, written into q's word of
// this rank (a write-value queued in e.ops, or where write-values to
// peers are refused a copy of a local word: B5); under capture a copy
// into the direction's half (the top of the file): of (1, 0) into this
// rank's pair of sender q (a credit) or (0, 1) into q's pair of this rank
// (data), or of 1 into q's graph word of the half.
func (e *Engine) p2pSignal(s hip.Stream, kind, q int) error {
	g, k := &e.sig, &e.sig.p2p
	if e.cur.capturing {
		if err := e.submit(s); err != nil {
			return err
		}
		if kind == sigCredit {
			h := k.gCreditTx[q]
			k.gCreditTx[q] ^= 1
			if g.pairs {
				return e.rt.MemcpyAsync(g.word(g.p2pPairWord(h, q, p2pCreditW)), g.word(g.signalPattern()), 8, s)
			}
			return e.rt.MemcpyAsync(g.win.PeerBase(q)+hip.DevicePtr(4*g.p2pGraphCreditWord(h, e.rank)), g.local(localOne), 4, s)
		}
		h := k.gDataTx[q]
		k.gDataTx[q] ^= 1
		if g.pairs {
			return e.rt.MemcpyAsync(g.win.PeerBase(q)+hip.DevicePtr(4*g.p2pPairWord(h, e.rank, p2pCreditW)), g.word(g.releasePattern()), 8, s)
		}
		return e.rt.MemcpyAsync(g.win.PeerBase(q)+hip.DevicePtr(4*g.p2pGraphDataWord(h, e.rank)), g.local(localOne), 4, s)
	}
	cnt, w := &k.dataSent[q], g.p2pDataWord(e.rank)
	if kind == sigCredit {
		cnt, w = &k.creditSent[q], g.p2pCreditWord(e.rank)
	}
	*cnt++
	dst := g.win.PeerBase(q) + hip.DevicePtr(4*w)
	if !g.copyFlags {
		e.ops = append(e.ops, hip.WriteValue32(dst, *cnt))
		return nil
	}
	// Credits go from the receives' stream, data from the sends': each
	// stream's copied signals have a word of their own (they may run at once).
	src := g.local(localSrc)
	if kind == sigCredit {
		src = g.local(localCreditSrc)
	}
	e.ops = append(e.ops, hip.WriteValue32(src, *cnt))
	if err := e.submit(s); err != nil {
		return err
	}
	return e.rt.MemcpyAsync(dst, src, 4, s)
}

// p2pWait queues the wait for kind from peer q: eagerly for its word to
// reach the direction's next count, under capture for its word of the
// direction's half: in q's pair of this rank (a credit) or this rank's
// pair of q (data), or this rank's graph word (resetWaits adds the
// resets).
func (e *Engine) p2pWait(kind, q int) {
	g, k := &e.sig, &e.sig.p2p
	if e.cur.capturing {
		var at hip.DevicePtr
		if kind == sigCredit {
			h := k.gCreditRx[q]
			k.gCreditRx[q] ^= 1
			at = g.word(g.p2pGraphCreditWord(h, q))
			if g.pairs {
				at = g.win.PeerBase(q) + hip.DevicePtr(4*g.p2pPairWord(h, e.rank, p2pCreditW))
			}
		} else {
			h := k.gDataRx[q]
			k.gDataRx[q] ^= 1
			at = g.word(g.p2pGraphDataWord(h, q))
			if g.pairs {
				at = g.word(g.p2pPairWord(h, q, p2pDataW))
			}
		}
		e.ops = append(e.ops, hip.WaitValue32(at, 1, hip.WaitGEQ))
		return
	}
	cnt, w := &k.dataWait[q], g.p2pDataWord(q)
	if kind == sigCredit {
		cnt, w = &k.creditWait[q], g.p2pCreditWord(q)
	}
	e.ops = append(e.ops, hip.WaitValue32(g.word(w), cnt.Add(1), hip.WaitGEQ))
}

// resetWaits follows the captured waits queued in e.ops with the resets
// of their words (in a batch of their own where writes may overtake
// waits); eager waits and pairs reset nothing.
func (e *Engine) resetWaits() {
	if !e.cur.capturing || e.sig.pairs || len(e.ops) == 0 {
		return
	}
	end := len(e.ops)
	e.fence()
	for i := range end {
		if e.ops[i].Op == hip.MemOpWaitValue32 {
			e.ops = append(e.ops, hip.WriteValue32(e.ops[i].Addr, 0))
		}
	}
}
