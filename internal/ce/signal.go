package ce

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"cecoll/internal/hip"
	"cecoll/internal/log"
	"cecoll/internal/result"
)

// Signals: how ranks tell each other that they reached a point of a
// collective. A sync is a set of signals, each from one rank (the writer)
// to another (the waiter), of one of three shapes (syncKind). Two
// implementations: flags in device memory (this file) and CUDA events
// (eventSync). chooseSignal picks one per call.
//
// Flags. Each rank's sync window holds, for every peer a, the words that
// a writes to signal it, in three regions:
//
//   - eager words, one per peer: the value of a signal is the sequence
//     number of its sync, counted alike on every rank (every rank runs the
//     same syncs, in the same order: the plans agree); a wait holds when
//     the word has reached that value (cyclic GEQ, so the 32-bit counter
//     may wrap: B18). Nothing is ever reset, so no write can be lost to a
//     late reset, and a writer that runs ahead only makes a wait pass
//     that would pass anyway.
//   - graph words: a captured graph is replayed with the values it was
//     captured with, so a captured signal writes the constant 1 and its
//     waiter resets the word to 0 right after its wait, in the same batch.
//     Syncs alternate between two arrays, and every captured collective
//     has an even number of syncs (B8), so a word is written again only
//     after its waiter reset it: a writer reaches the same array again
//     only past the sync in between, which needs a signal its waiter sends
//     after the reset. A captured signal is a 4-byte copy of a word of
//     ones into the writer's word at the waiter: in a graph a copy node
//     costs well under a batch of write-values (docs/performance.md,
//     "Flag operations in a graph").
//   - pairs, where every rank runs on one device: a captured sync between
//     a root and its peers (a star's, a rooted plan's) is half of a round
//     trip between the root and each peer, and each round trip goes
//     through one aligned 8-byte pair of words in the root's window: the
//     peer's arrival word, then its release word. The peer's signal writes
//     (1, 0) over the pair, the root's release (0, 1) over every peer's
//     pair at once (one copy of 8n bytes), so each write sets the other
//     side's word and zeroes the one its writer waits on next: no wait
//     resets a word, and a graph holds no write-value. That holds because
//     the two sides of a pair strictly alternate: each writes only after
//     its wait saw the other's write, and an aligned 8-byte write lands
//     whole (docs/performance.md, "Pairs"). So each pair keeps the same
//     order for its whole life, in every graph and between replays: round
//     trips the peer opens (peerOpens: its signal, then the release) and
//     those the root opens (rootOpens: released plans, the release first)
//     use pairs of their own.
//
// The regions are apart, so a graph's wait can never pass on a value an
// eager call left (B10), and an eager wait never on a graph's 1.
//
// An eager signal is a write-value into the waiter's word, or, where the
// driver refuses write-values to peer memory (B5) or when asked, a 4-byte
// copy of a device word holding the value (B4: never host memory), which
// a local write-value sets first (stream order keeps the copy after it).
// With multicast (all pairs only, more than two ranks, B6) one write
// reaches every peer. Captured signals are copies to each peer.
//
// Abort writes, from its own stream and every millisecond until Close,
// a value far past every pending eager wait and ones into every graph
// word of this rank, every arrival word of its pairs and its release word
// in every peer's pairs: every wait this rank's streams have queued passes.

// A sync window of n ranks holds, in words (layout): the pairs
// (peerOpens, then rootOpens: 2n words each, the pair of peer p at 2p),
// the captured point-to-point pairs (p2p.go: two halves of 2n words, the
// pair of sender p at 2p), the release pattern ((0, 1) n times) and right
// after it the signal pattern (1, 0) that pair writes copy, the eager
// words (n, by writer),
// the graph words (2n: two arrays by writer), the point-to-point words
// (p2p.go: eager data and credit words, n each, by peer; their graph
// words, two arrays of each), then the local words below. Every pair
// lies at a multiple of 8 bytes.
type layout struct {
	pairs          [2]int // the pair sets, by set
	p2pPairs       [2]int // captured point-to-point on one device: two halves, a pair by sender
	releasePat     int
	signalPat      int
	eager          int
	graph          [2]int // by array
	p2pData        int    // the data counter each peer writes here
	p2pCredit      int    // the credit counter each peer writes here
	p2pGraphData   [2]int
	p2pGraphCredit [2]int
	local          int
	words          int
}

func newLayout(n int) layout {
	var l layout
	take := func(k int) int { at := l.words; l.words += k; return at }
	l.pairs[0], l.pairs[1] = take(2*n), take(2*n)
	l.p2pPairs[0], l.p2pPairs[1] = take(2*n), take(2*n)
	l.releasePat = take(2 * n)
	l.signalPat = take(2)
	l.eager = take(n)
	l.graph[0], l.graph[1] = take(n), take(n)
	l.p2pData, l.p2pCredit = take(n), take(n)
	l.p2pGraphData[0], l.p2pGraphData[1] = take(n), take(n)
	l.p2pGraphCredit[0], l.p2pGraphCredit[1] = take(n), take(n)
	l.local = take(localWords)
	return l
}

const (
	localSrc       = 0 // the value an eager copied signal carries
	localScratch   = 1 // the warm-up's word
	localOne       = 2 // 1: what captured signals without pairs copy
	localCreditSrc = 3 // the value of an eager copied p2p credit (the receives' stream, p2p.go)
	localWords     = 4
)

// Pair sets, and the words of a pair.
const (
	noPairs     = -1 // this sync's flags are not pairs
	peerOpens   = 0  // round trips opened by the peers' signals
	rootOpens   = 1  // round trips opened by the root's release
	pairArrive  = 0  // the peer writes 1, the root waits
	pairRelease = 1  // the root writes 1, the peer waits
)

type signals struct {
	n, me     int
	l         layout
	base      hip.DevicePtr // this rank's sync window memory
	size      uintptr
	win       Window
	mc        hip.DevicePtr // multicast address of the window; 0: unicast
	star      bool          // a full sync goes through rank 0 (SyncStar)
	copyFlags bool          // eager signals are copies (B5)
	pairs     bool          // captured rooted syncs go through pairs (one device)
	seq       atomic.Uint32 // eager syncs so far: the value of the last one
	gpar      uint32        // the graph array of the next captured sync
	p2p       p2pCounters   // the pairs' point-to-point signals (p2p.go)
	ev        hip.Event     // this rank's event, for event syncs

	abortStream hip.Stream
	relMu       sync.Mutex // orders startRelease (Abort) with stopRelease (Close)
	relEnded    bool       // stopRelease ran: the words may be freed
	relStop     chan struct{}
	relDone     chan struct{}
}

// word is the address of word i of this rank's window.
func (g *signals) word(i int) hip.DevicePtr { return g.base + hip.DevicePtr(4*i) }

func (g *signals) pairWord(set, peer, w int) int        { return g.l.pairs[set] + 2*peer + w }
func (g *signals) releasePattern() int                  { return g.l.releasePat }
func (g *signals) signalPattern() int                   { return g.l.signalPat }
func (g *signals) eagerWord(writer int) int             { return g.l.eager + writer }
func (g *signals) graphWord(arr uint32, writer int) int { return g.l.graph[arr] + writer }
func (g *signals) local(j int) hip.DevicePtr            { return g.word(g.l.local + j) }

// p2pPairWord is word w (p2pCreditW, p2pDataW) of the captured pair of
// half h between sender s and this rank, the receiver (p2p.go).
func (g *signals) p2pPairWord(h uint8, s, w int) int { return g.l.p2pPairs[h] + 2*s + w }

// The point-to-point words (p2p.go), by the peer that writes them.
func (g *signals) p2pDataWord(writer int) int   { return g.l.p2pData + writer }
func (g *signals) p2pCreditWord(writer int) int { return g.l.p2pCredit + writer }
func (g *signals) p2pGraphDataWord(arr uint8, writer int) int {
	return g.l.p2pGraphData[arr] + writer
}
func (g *signals) p2pGraphCreditWord(arr uint8, writer int) int {
	return g.l.p2pGraphCredit[arr] + writer
}

func (g *signals) init(e *Engine) error {
	rt, n := e.rt, e.n
	g.n, g.me, g.l = n, e.rank, newLayout(n)
	g.p2p.init(n)
	switch e.cfg.FlagWrite {
	case FlagWriteCopy:
		g.copyFlags = true
	case FlagWriteValue:
		if !e.caps.PeerWriteValue {
			return result.Errorf(result.InvalidUsage, "ce init: CECOLL_FLAG_WRITE=%s asked for, but this device refuses write-value to peer memory (use auto or copy)", FlagWriteValue)
		}
	default:
		g.copyFlags = !e.caps.PeerWriteValue
	}
	// Every rank picks the same: the configuration, n and the backend.
	mcUsable := e.caps.Multicast && n > 2
	switch e.cfg.Sync {
	case SyncStar:
		g.star = n > 2
	case SyncAuto:
		g.star = n >= 4 && !mcUsable
	}
	g.pairs = e.c.OneDevice()
	// B17: zeroed before anyone uses it; Init's barrier comes after.
	g.size = alignUp(uintptr(g.l.words)*4, 64)
	var err error
	if g.base, err = rt.MemAlloc(g.size); err != nil {
		return initErr("sync window alloc", err)
	}
	if err := rt.Memset(g.base, 0, g.size); err != nil {
		return initErr("sync window zero", err)
	}
	// The release pattern, (0, 1) n times, then the signal pattern (1, 0).
	pat := make([]byte, 4*(2*n+2))
	for i := range n {
		pat[4*(2*i+pairRelease)] = 1
	}
	pat[4*(2*n+pairArrive)] = 1
	if err := hip.CopyToDevice(rt, g.word(g.releasePattern()), pat); err != nil {
		return initErr("flag pattern init", err)
	}
	if err := hip.CopyToDevice(rt, g.local(localOne), []byte{1, 0, 0, 0}); err != nil {
		return initErr("flag word init", err)
	}
	if g.win, err = e.c.RegisterWindow(g.base, g.size); err != nil {
		return initErr("sync window register", err)
	}
	if g.ev, err = rt.EventCreate(hip.EventDisableTiming); err != nil {
		return initErr("event create", err)
	}
	// Multicast eagerly, before Init's barrier (B6).
	if mcUsable && !g.star {
		members := make([]hip.DevicePtr, n)
		for r := range n {
			members[r] = g.win.PeerBase(r)
		}
		if g.mc, err = rt.MulticastCreate(members, g.size); err != nil {
			return initErr("multicast create", err)
		}
	}
	return nil
}

func (g *signals) release(e *Engine, keep func(error)) {
	if g.mc != 0 {
		keep(e.rt.MulticastDestroy(g.mc))
		g.mc = 0
	}
	if g.ev != 0 {
		keep(e.rt.EventDestroy(g.ev))
		g.ev = 0
	}
	if g.win != nil {
		keep(e.c.DeregisterWindow(g.win))
		g.win = nil
	}
}

// next starts a sync: the value it signals and, under capture, its array.
func (g *signals) next(capturing bool) (uint32, uint32) {
	if capturing {
		arr := g.gpar
		g.gpar ^= 1
		return 1, arr
	}
	return g.seq.Add(1), 0
}

// syncKind is the shape of a sync.
type syncKind uint8

const (
	syncNone     syncKind = iota
	syncFull              // every rank waits for every rank
	syncToRoot            // the root waits for every peer
	syncFromRoot          // every peer waits for the root
)

// flagSync enqueues a sync of kind k at root c on s, with this rank's
// local copies (copyList segLocal) after its own signals and before its
// waits, where they overlap the wait instead of lengthening the step.
// Under star a full sync takes two hops through rank 0: the peers signal
// it, it waits for them and releases them (its local copies come first).
func (e *Engine) flagSync(s hip.Stream, k syncKind, c int, capturing bool) error {
	g := &e.sig
	if k == syncNone || e.n == 1 {
		return e.localCopies(s, capturing)
	}
	v, arr := g.next(capturing)
	f := flags{v: v, arr: arr, set: noPairs, capturing: capturing}
	if capturing && g.pairs && (k != syncFull || g.star) {
		f.set = peerOpens
		if k != syncFull && e.cur.plan.rootOpens() {
			f.set = rootOpens
		}
	}
	me := e.rank
	e.ops = e.ops[:0]
	var err error
	switch {
	case k == syncFull && g.star && me != 0, k == syncToRoot && me != c:
		to := c
		if k == syncFull {
			to = 0
		}
		err = e.signal(s, to, f)
		if err == nil {
			err = e.localCopies(s, capturing)
		}
		if err == nil && k == syncFull {
			e.await(to, f)
		}
	case k == syncFull && g.star: // rank 0
		err = e.localCopies(s, capturing)
		if err == nil {
			e.await(-1, f)
			e.fence()
			err = e.releasePeers(s, f)
		}
	case k == syncFull, k == syncFromRoot && me == c:
		if k == syncFull {
			err = e.signal(s, -1, f)
		} else {
			err = e.releasePeers(s, f)
		}
		if err == nil {
			err = e.localCopies(s, capturing)
		}
		if err == nil && k == syncFull {
			e.await(-1, f)
		}
	case k == syncToRoot: // me == c
		err = e.localCopies(s, capturing)
		if err == nil {
			e.await(-1, f)
		}
	default: // syncFromRoot, me != c
		err = e.localCopies(s, capturing)
		if err == nil {
			e.await(c, f)
		}
	}
	if err != nil {
		return err
	}
	return e.submit(s)
}

// flags is what one sync's signals and waits write and wait for: eagerly
// the value v; under capture 1, in graph array arr or, where set is not
// noPairs, in that set of pairs.
type flags struct {
	v, arr    uint32
	set       int
	capturing bool
}

// signal is a gather's signal (every peer signals one waiter): from this
// rank to rank to, or to every peer when to < 0 (all pairs; eagerly
// through multicast where there is one).
func (e *Engine) signal(s hip.Stream, to int, f flags) error {
	g := &e.sig
	if !f.capturing {
		return e.eagerSignal(s, to, f.v)
	}
	if err := e.submit(s); err != nil {
		return err
	}
	if f.set != noPairs {
		dst := g.win.PeerBase(to) + hip.DevicePtr(4*g.pairWord(f.set, e.rank, 0))
		return e.rt.MemcpyAsync(dst, g.word(g.signalPattern()), 8, s)
	}
	return e.copyFlag(s, to, hip.DevicePtr(4*g.graphWord(f.arr, e.rank)), g.local(localOne))
}

// releasePeers is a release's signal: from this rank to every peer. It is
// signal's, except through pairs: (0, 1) over every peer's pair of this
// rank, one copy for all (see the top of the file).
func (e *Engine) releasePeers(s hip.Stream, f flags) error {
	g := &e.sig
	if f.set == noPairs {
		return e.signal(s, -1, f)
	}
	if err := e.submit(s); err != nil {
		return err
	}
	return e.rt.MemcpyAsync(g.word(g.pairWord(f.set, 0, 0)), g.word(g.releasePattern()), uintptr(8*e.n), s)
}

// eagerSignal writes v into this rank's eager word at rank to, or at every
// peer when to < 0 (through multicast where there is one): a write-value,
// or where the driver refuses write-values to peer memory (B5) or when
// asked, a 4-byte copy of a local word a write-value set to v first
// (stream order keeps the copy after it; B4: never host memory).
func (e *Engine) eagerSignal(s hip.Stream, to int, v uint32) error {
	g := &e.sig
	off := hip.DevicePtr(4 * g.eagerWord(e.rank))
	if !g.copyFlags {
		switch {
		case to >= 0:
			e.ops = append(e.ops, hip.WriteValue32(g.win.PeerBase(to)+off, v))
		case g.mc != 0:
			e.ops = append(e.ops, hip.WriteValue32(g.mc+off, v))
		default:
			for r := range e.n {
				if r != e.rank {
					e.ops = append(e.ops, hip.WriteValue32(g.win.PeerBase(r)+off, v))
				}
			}
		}
		return nil
	}
	src := g.local(localSrc)
	e.ops = append(e.ops, hip.WriteValue32(src, v))
	if err := e.submit(s); err != nil {
		return err
	}
	if to < 0 && g.mc != 0 {
		return e.rt.MemcpyAsync(g.mc+off, src, 4, s)
	}
	return e.copyFlag(s, to, off, src)
}

// copyFlag copies the flag word at src to offset off of rank to's sync
// window, or of every peer's when to < 0, one copy each.
func (e *Engine) copyFlag(s hip.Stream, to int, off, src hip.DevicePtr) error {
	g := &e.sig
	if to >= 0 {
		return e.rt.MemcpyAsync(g.win.PeerBase(to)+off, src, 4, s)
	}
	for r := range e.n {
		if r != e.rank {
			if err := e.rt.MemcpyAsync(g.win.PeerBase(r)+off, src, 4, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// await queues this rank's waits: for a release from rank from, or, when
// from < 0, for a gather's signals from every peer. Under capture each
// wait on a graph word is followed by the reset of its word (in a batch of
// its own where writes may overtake waits); a wait on a pair resets
// nothing (this rank's next write to the pair zeroes its word).
func (e *Engine) await(from int, f flags) {
	g := &e.sig
	mark := len(e.ops)
	switch {
	case !f.capturing:
		for r := range e.n {
			if r != e.rank && (from < 0 || r == from) {
				e.ops = append(e.ops, hip.WaitValue32(g.word(g.eagerWord(r)), f.v, hip.WaitGEQ))
			}
		}
		return
	case f.set != noPairs && from < 0:
		for r := range e.n {
			if r != e.rank {
				e.ops = append(e.ops, hip.WaitValue32(g.word(g.pairWord(f.set, r, pairArrive)), 1, hip.WaitGEQ))
			}
		}
		return
	case f.set != noPairs:
		w := g.win.PeerBase(from) + hip.DevicePtr(4*g.pairWord(f.set, e.rank, pairRelease))
		e.ops = append(e.ops, hip.WaitValue32(w, 1, hip.WaitGEQ))
		return
	case from < 0:
		for r := range e.n {
			if r != e.rank {
				e.ops = append(e.ops, hip.WaitValue32(g.word(g.graphWord(f.arr, r)), 1, hip.WaitGEQ))
			}
		}
	default:
		e.ops = append(e.ops, hip.WaitValue32(g.word(g.graphWord(f.arr, from)), 1, hip.WaitGEQ))
	}
	e.fence()
	end := len(e.ops)
	for i := mark; i < end; i++ {
		if e.ops[i].Op == hip.MemOpWaitValue32 {
			e.ops = append(e.ops, hip.WriteValue32(e.ops[i].Addr, 0))
		}
	}
}

// fence ends the batch under construction where the runtime may let a
// batch's later writes overtake its waits (HIP): what follows goes in the
// next one. The ops stay queued in e.ops; submit sends them.
func (e *Engine) fence() {
	if e.caps.SplitWaitReset && len(e.ops) > 0 {
		e.cuts = append(e.cuts, len(e.ops))
	}
}

// submit enqueues e.ops on s, in batches of at most 255 entries (B7) and a
// new batch at every fence.
func (e *Engine) submit(s hip.Stream) error {
	ops, cuts := e.ops, e.cuts
	e.ops, e.cuts = e.ops[:0], e.cuts[:0]
	at := 0
	for _, c := range append(cuts, len(ops)) {
		if c > at {
			if err := hip.BatchMemOps(e.rt, s, ops[at:c]); err != nil {
				return err
			}
		}
		at = c
	}
	return nil
}

// eventSync is a sync by events: phase 0 records this rank's event where
// it signals and enqueues its local copies; phase 1 waits for the events
// of the ranks it waits for. Every rank's phase 0 runs before any rank's
// phase 1 (the group's step order), since a wait binds to the record made
// before it. One event per rank is enough: it is recorded again only in
// the next sync's phase 0, after every wait on this record.
func (e *Engine) eventSync(s hip.Stream, k syncKind, c, phase int, evs []hip.Event) error {
	me := e.rank
	if phase == 0 {
		if k == syncFull || k == syncToRoot && me != c || k == syncFromRoot && me == c {
			if err := e.rt.EventRecord(e.sig.ev, s); err != nil {
				return err
			}
		}
		return e.localCopies(s, false)
	}
	switch {
	case k == syncFull, k == syncToRoot && me == c:
		for r, ev := range evs {
			if r != me {
				if err := e.rt.StreamWaitEvent(s, ev); err != nil {
					return err
				}
			}
		}
	case k == syncFromRoot && me != c:
		return e.rt.StreamWaitEvent(s, evs[c])
	}
	return nil
}

// releaseValue is what Abort writes into an eager word: far past every
// value a pending wait of this rank can hold (at most the current
// sequence), and within 2^31 of it, where the cyclic GEQ holds.
func (g *signals) releaseValue() uint32 { return g.seq.Load() + 1<<30 }

// startRelease starts Abort's release loop: every millisecond, from its own
// stream, the release value into every eager word and 1 into every graph
// word and pair arrival word of this rank and into its release words at
// its peers. It repeats because a peer's late eager write may lower a word
// again, a captured wait resets its word and a pair write zeroes one.
// Never after stopRelease: Close frees the words then (an Abort from a
// peer-failure handler may come after Close).
func (g *signals) startRelease(e *Engine) {
	g.relMu.Lock()
	defer g.relMu.Unlock()
	if g.relEnded {
		return
	}
	g.relStop, g.relDone = make(chan struct{}), make(chan struct{})
	go func(stop <-chan struct{}, done chan<- struct{}) {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := e.rt.SetDevice(e.dev); err != nil {
			log.Warnf("ce abort: rank %d: set device: %v", e.rank, err)
			return
		}
		// Its own stream, never the legacy NULL stream, which waits behind
		// every blocking stream of the process (a parked one too); a
		// failed creation is tried again at the next tick.
		var s hip.Stream
		for s == 0 {
			var err error
			if s, err = e.rt.StreamCreate(); err != nil {
				log.Warnf("ce abort: rank %d: stream create: %v; trying again", e.rank, err)
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}
		g.abortStream = s
		ops := make([]hip.MemOp, 0, 17*g.n)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			ops = ops[:0]
			rv := g.releaseValue()
			for r := range g.n {
				ops = append(ops, hip.WriteValue32(g.word(g.eagerWord(r)), rv),
					hip.WriteValue32(g.word(g.p2pDataWord(r)), g.p2p.dataWait[r].Load()+1<<30),
					hip.WriteValue32(g.word(g.p2pCreditWord(r)), g.p2p.creditWait[r].Load()+1<<30))
				for arr := range uint32(2) {
					ops = append(ops, hip.WriteValue32(g.word(g.graphWord(arr, r)), 1),
						hip.WriteValue32(g.word(g.p2pGraphDataWord(uint8(arr), r)), 1),
						hip.WriteValue32(g.word(g.p2pGraphCreditWord(uint8(arr), r)), 1))
				}
				for h := range uint8(2) {
					if g.pairs && r != g.me { // this rank's data waits, and its credit waits at r
						ops = append(ops, hip.WriteValue32(g.word(g.p2pPairWord(h, r, p2pDataW)), 1),
							hip.WriteValue32(g.win.PeerBase(r)+hip.DevicePtr(4*g.p2pPairWord(h, g.me, p2pCreditW)), 1))
					}
				}
				for set := range 2 {
					if g.pairs && r != g.me {
						ops = append(ops, hip.WriteValue32(g.word(g.pairWord(set, r, pairArrive)), 1),
							hip.WriteValue32(g.win.PeerBase(r)+hip.DevicePtr(4*g.pairWord(set, g.me, pairRelease)), 1))
					}
				}
			}
			if err := hip.BatchMemOps(e.rt, s, ops); err != nil {
				log.Warnf("ce abort: rank %d: release flag waits: %v", e.rank, err)
				return
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}(g.relStop, g.relDone)
}

// stopRelease ends the release loop, if running, and any later start.
func (g *signals) stopRelease() {
	g.relMu.Lock()
	defer g.relMu.Unlock()
	g.relEnded = true
	if g.relStop == nil {
		return
	}
	close(g.relStop)
	<-g.relDone
	g.relStop, g.relDone = nil, nil
}
