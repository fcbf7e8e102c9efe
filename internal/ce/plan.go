package ce

import (
	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// A collective is a plan: which blocks move from which rank's memory to
// which, which rank issues each copy, and the syncs around the copies.
// Every rank computes the same plan from what all ranks agree on (the
// call's arguments under NCCL's contract, the communicator's layout and
// configuration, whether the call is captured), so every rank runs the
// same steps and no rank waits on the host for another (B11). A plan runs
// as steps: a sync, then copies. This file decides, for every collective
// and form, the path, the plan and each step's copies.
//
// Paths: how a rank reaches its peers' buffers.
//   - group: every rank's buffers are known (Args.PeerSend/PeerRecv: all
//     ranks issued in one group of one thread).
//   - window: the deciding buffer (the operation's row, op.go: Decides)
//     lies in a symmetric window, so a peer's buffer is at a computable
//     offset of the peer's window: that of the pointer NCCL's contract
//     makes symmetric (Op.Symmetric: the deciding buffer, or a rooted
//     root's longer buffer in the in-place layout). Only the root copies
//     on the rooted window path, so only it needs to know which form it
//     is; the peers decide the path by the same buffer, which lies in the
//     window in both forms.
//   - staged: anything else; blocks go through the receivers' staging
//     windows, in rounds of what they hold.
//
// Plans (planKind): push, swap, rooted, released, hub, local; see their
// fill functions below.

type path uint8

const (
	pathLocal path = iota // one rank
	pathGroup
	pathWindow
	pathStaged
	pathP2P // a batch of transfers, each direct or staged (p2p.go)
)

func (p path) String() string {
	return [...]string{"local", "group", "zero-copy", "staged", "per transfer"}[p]
}

type planKind uint8

const (
	kindLocal    planKind = iota
	kindPush              // AllGather, AlltoAll: every rank pushes its blocks between full syncs
	kindSwap              // in-place AlltoAll on a direct path: pairwise swaps through scratch
	kindRooted            // Broadcast, Scatter, Gather: the root makes every copy between half syncs
	kindReleased          // the rooted ones on the group path: every rank copies its own block
	kindHub               // small AllGather, AlltoAll on one device: rank 0 makes every copy
	kindP2P               // a batch of sends and receives (p2p.go)
	kindChain             // Broadcast across devices: each rank forwards the pieces to the next
)

func (k planKind) String() string {
	return [...]string{"local", "push", "swap", "rooted", "released", "hub", "p2p", "chain"}[k]
}

// plan is a prepared call's plan. It is a value inside Engine.cur: making
// one allocates nothing.
type plan struct {
	a       Args
	kind    planKind
	path    path
	chunk   uintptr
	piece   uintptr // bytes of a block moved per round
	rounds  int
	sub     int // push: sub-batches per round (B9)
	per     int // steps per round
	steps   int
	inPlace bool    // the form, as this rank sees it (see path)
	layout  bool    // window path: the peers' blocks lie chunk apart from the symmetric pointer (Op.Symmetric)
	win     Window  // window path: the window of the symmetric pointer
	wOff    uintptr // its offset there
	pairs   int     // swap: the most pairs one rank handles
}

// build plans a validated call on every rank alike.
func (e *Engine) build(p *plan, a *Args, chunk uintptr, capturing bool) error {
	*p = plan{a: *a, chunk: chunk, rounds: 1, sub: 1, per: 2}
	n := e.n
	p.inPlace = OpOf(a.Func).InPlace(a, e.rank)
	if err := e.route(p, a); err != nil {
		return err
	}
	switch {
	case p.path == pathLocal:
		p.kind, p.per = kindLocal, 1
	case e.useChain(p):
		p.kind, p.per = kindChain, 1
		p.piece = e.chainPiece(chunk)
		if p.path == pathWindow {
			var err error
			if p.wOff, err = inWindow(p.win, a.Recv, chunk); err != nil {
				return err
			}
		}
	case a.Func.Rooted() && p.path == pathGroup:
		p.kind = kindReleased
	case a.Func.Rooted():
		p.kind = kindRooted
		if p.path == pathStaged {
			p.piece = e.piece(1, chunk)
		}
	case e.useHub(p):
		p.kind = kindHub
	case a.Func == FuncAlltoAll && p.inPlace && p.path != pathStaged:
		p.kind = kindSwap
		p.pairs = n / 2 // the most pairs one rank handles (handler)
		p.piece = e.piece(p.pairs, chunk)
		p.per = 1
	default:
		p.kind = kindPush
		if p.path == pathStaged {
			p.piece = e.piece(n, chunk)
		}
		p.sub = e.subBatches(chunk)
		p.per = p.sub + 1
	}
	if p.piece == 0 {
		p.piece = chunk
	}
	p.rounds = int((chunk + p.piece - 1) / p.piece)
	if p.kind == kindChain {
		p.rounds += n - 1 // the pipeline's fill, and the last piece's final sync
	}
	p.steps = p.rounds * p.per
	syncs := p.steps
	if p.kind == kindSwap {
		p.steps = p.rounds + 1 // a sync with round 0, the later rounds, the final sync
		syncs = 2
	}
	if capturing && syncs&1 == 1 && p.kind != kindLocal {
		// B8: a captured collective keeps its number of syncs even, so
		// that the graph arrays alternate in step on every replay.
		p.steps++
	}
	return nil
}

// route chooses the path from the deciding buffer (see the top of the
// file) and, on the window path, the offset of the symmetric pointer.
func (e *Engine) route(p *plan, a *Args) error {
	switch {
	case e.n == 1:
		p.path = pathLocal
		return nil
	case a.PeerSend != nil && a.PeerRecv != nil:
		p.path = pathGroup
		if a.Func == FuncAlltoAll && mixedInPlace(a) {
			// The swap plan needs every rank in place; a group shows
			// every rank's form, so all take the staged plan alike.
			p.path = pathStaged
		}
		return nil
	}
	o := OpOf(a.Func)
	buf, size := o.Deciding(a, e.n)
	win := a.RecvWin
	if o.Decides == SideSend {
		win = a.SendWin
	}
	if win == nil {
		var ok bool
		if win, ok = e.c.FindWindow(buf, size); !ok {
			p.path = pathStaged
			return nil
		}
	}
	p.path, p.win = pathWindow, win
	if o.Rooted() && a.Root != e.rank {
		return nil // only the root copies
	}
	sym, symSize, layout := o.Symmetric(a, e.rank, e.n)
	p.layout = layout
	var err error
	p.wOff, err = inWindow(win, sym, symSize)
	return err
}

// mixedInPlace reports whether a group's AlltoAll is in place on some
// ranks and not on others.
func mixedInPlace(a *Args) bool {
	in := a.PeerSend[0] == a.PeerRecv[0]
	for r := range a.PeerSend {
		if (a.PeerSend[r] == a.PeerRecv[r]) != in {
			return true
		}
	}
	return false
}

// inWindow is the offset of p in w, with a check that [p, p+n) lies in it.
func inWindow(w Window, p hip.DevicePtr, n uintptr) (uintptr, error) {
	if p < w.Base() || uintptr(p-w.Base()) > w.Size() || n > w.Size()-uintptr(p-w.Base()) {
		return 0, result.Errorf(result.InvalidArgument, "ce: buffer %#x+%d is not inside its window %#x+%d", uintptr(p), n, uintptr(w.Base()), w.Size())
	}
	return uintptr(p - w.Base()), nil
}

// piece is the bytes of one block per round when blocks blocks share a
// staging window: whole when they fit, else a 256-byte multiple. It
// depends on n, chunk and the configuration only, so every rank runs the
// same rounds.
func (e *Engine) piece(blocks int, chunk uintptr) uintptr {
	per := e.stageSize / uintptr(max(blocks, 1))
	if per >= 256 {
		per &^= 255
	}
	return max(min(per, chunk), 1)
}

// subBatches is the number of sub-batches of a push round: more than one
// only with more ranks than the frequency and at least the threshold moved
// (chunk*n). It depends on n and chunk only, so every rank runs the same
// number of syncs whether or not it copies its own block (B9).
func (e *Engine) subBatches(chunk uintptr) int {
	f := e.cfg.IntraBatchSyncFreq
	if e.n <= f || uint64(chunk)*uint64(e.n) < e.cfg.IntraBatchSyncThreshold {
		return 1
	}
	return (e.n + f - 1) / f
}

// useHub: a small AllGather or AlltoAll on the group path with every rank
// on one device runs as one rooted round at rank 0, which makes every copy
// (kindHub): two hops of flags instead of the four of two star syncs
// (docs/performance.md, "Hub and released rounds, in us").
func (e *Engine) useHub(p *plan) bool {
	bytes := uint64(p.chunk) * uint64(e.n)
	if p.path != pathGroup || e.cfg.HubBytes <= 0 || !e.c.OneDevice() || bytes > uint64(e.cfg.HubBytes) {
		return false
	}
	return p.a.Func != FuncAlltoAll || (bytes <= hubAlltoAllBytes && bytes*uint64(e.n) <= uint64(e.stageSize))
}

// hubRoot is the rank that makes a hub round's copies.
const hubRoot = 0

// fill puts step i's copies into e.cp and returns its sync.
func (e *Engine) fill(i int) (syncKind, int) {
	p := &e.cur.plan
	e.cp.reset()
	if e.padded(i) {
		return syncFull, 0 // B8's extra sync
	}
	r, j := i/p.per, i%p.per
	o := uintptr(r) * p.piece
	l := min(p.piece, p.chunk-min(o, p.chunk))
	switch p.kind {
	case kindLocal:
		e.fillLocal()
		return syncNone, 0
	case kindPush:
		return e.fillPush(j, o, l)
	case kindSwap:
		return e.fillSwap(r, o, l)
	case kindRooted:
		return e.fillRooted(j, o, l)
	case kindReleased:
		return e.fillReleased(j)
	case kindHub:
		return e.fillHub(j)
	case kindChain:
		return e.fillChain(i)
	}
	return syncNone, 0
}

// padded reports whether step i is B8's extra sync, not one of the plan's.
func (e *Engine) padded(i int) bool {
	p := &e.cur.plan
	planned := p.rounds * p.per
	if p.kind == kindSwap {
		planned = p.rounds + 1
	}
	return i >= planned
}

// fillLocal: one rank; its own block only.
func (e *Engine) fillLocal() {
	a := &e.cur.plan.a
	if a.Send != a.Recv {
		e.cp.addTo(segLocal, a.Recv, a.Send, e.cur.plan.chunk)
	}
}

// fillPush: AllGather and AlltoAll. Slot j of the rotation is peer
// (me+j)%n (slot 0: this rank), which spreads the load. A round is sub
// sub-batches of slots, each after a full sync, then a full sync after
// which a staged rank copies the round's blocks out of its staging. The
// own block goes first, as a local copy: nobody else touches it. Push
// destinations: a peer's recv (group), the same offset of the peer's
// window, or this rank's slot of the peer's staging.
func (e *Engine) fillPush(j int, o, l uintptr) (syncKind, int) {
	p := &e.cur.plan
	a, n, me, chunk := &p.a, e.n, e.rank, p.chunk
	if j == p.sub {
		if p.path == pathStaged {
			e.cp.seg(segStage1)
			for q := range n {
				if q != me {
					e.cp.add(a.Recv+hip.DevicePtr(uintptr(q)*chunk+o), e.stageBase+hip.DevicePtr(uintptr(q)*p.piece), l)
				}
			}
		}
		return syncFull, 0
	}
	myOff := uintptr(me)*chunk + o
	f := e.cfg.IntraBatchSyncFreq
	lo, hi := 0, n
	if p.sub > 1 {
		lo, hi = j*f, min((j+1)*f, n)
	}
	if lo == 0 && !p.inPlace {
		e.cp.seg(segLocal)
		e.cp.add(a.Recv+hip.DevicePtr(myOff), pushSrc(a, me, chunk, o), l)
	}
	e.cp.seg(segStage1)
	for slot := max(lo, 1); slot < hi; slot++ {
		d := (me + slot) % n
		var dst hip.DevicePtr
		switch p.path {
		case pathGroup:
			dst = a.PeerRecv[d] + hip.DevicePtr(myOff)
		case pathWindow:
			dst = p.win.PeerBase(d) + hip.DevicePtr(p.wOff+myOff)
		default:
			dst = e.stageWin.PeerBase(d) + hip.DevicePtr(uintptr(me)*p.piece)
		}
		e.cp.add(dst, pushSrc(a, d, chunk, o), l)
	}
	return syncFull, 0
}

// pushSrc is where this rank's block for rank d starts, o bytes in.
func pushSrc(a *Args, d int, chunk, o uintptr) hip.DevicePtr {
	if a.Func == FuncAlltoAll {
		return a.Send + hip.DevicePtr(uintptr(d)*chunk+o)
	}
	return a.Send + hip.DevicePtr(o)
}

// handler is the rank that swaps the blocks of pair {a, b} of an in-place
// AlltoAll: the one the other follows by less than half the ring. A pair
// at exactly half (n even) is split: the lower rank swaps the first half
// of its blocks, the higher one the rest (handler names the lower). So
// every rank moves (n-1)/2 pairs' worth, no rank idles (n=2) or carries
// the halfway pairs alone (docs/performance.md, "In-place AlltoAll").
func handler(a, b, n int) int {
	d := (b - a + n) % n
	switch {
	case 2*d < n:
		return a
	case 2*d > n:
		return b
	}
	return min(a, b)
}

// fillSwap: in-place AlltoAll where this rank reaches its peers' buffers
// (group, window). Block (a, b), rank a's block for b, must end where
// block (b, a) is, and the other way round: a swap. The pair's handler h
// (each rank of a halfway pair for its half), with peer d, saves its
// block for d into its staging window (scratch),
// pulls d's block for h into its place, and pushes the saved block into
// d's buffer: three copies for two blocks, against four through staging,
// in three batches whose order the stream keeps. Round r moves piece
// bytes of every block. A full sync precedes round 0 (every rank's buffer
// is ready) and one ends the last round; the rounds in between need none:
// nobody but its handler touches a byte of a pair's blocks, and each
// rank's stream orders its rounds' use of its scratch.
func (e *Engine) fillSwap(r int, o, l uintptr) (syncKind, int) {
	p := &e.cur.plan
	if r >= p.rounds {
		return syncFull, 0 // the final sync
	}
	a, n, me, chunk := &p.a, e.n, e.rank, p.chunk
	for g := segStage1; g <= segStage3; g++ { // segments are filled in order
		e.cp.seg(g)
		k := 0
		for s := 1; s < n; s++ {
			d := (me + s) % n
			at, m := o, l
			switch {
			case 2*s == n: // split: the lower rank the first h bytes
				h := (l / 2) &^ 255
				if me < d {
					m = h
				} else {
					at, m = o+h, l-h
				}
			case handler(me, d, n) != me:
				continue
			}
			if m == 0 {
				continue
			}
			mine := a.Recv + hip.DevicePtr(uintptr(d)*chunk+at)
			var theirs hip.DevicePtr
			if p.path == pathGroup {
				theirs = a.PeerRecv[d] + hip.DevicePtr(uintptr(me)*chunk+at)
			} else {
				theirs = p.win.PeerBase(d) + hip.DevicePtr(p.wOff+uintptr(me)*chunk+at)
			}
			tmp := e.stageBase + hip.DevicePtr(uintptr(k)*p.piece)
			switch g {
			case segStage1:
				e.cp.add(tmp, mine, m)
			case segStage2:
				e.cp.add(mine, theirs, m)
			default:
				e.cp.add(theirs, tmp, m)
			}
			k++
		}
	}
	if r > 0 {
		return syncNone, 0
	}
	return syncFull, 0
}

// fillRooted: Broadcast, Scatter and Gather, the root's copies. Step 0:
// the peers signal the root (Gather staged: after copying their block
// into their staging), which copies its own block and every peer's; step
// 1: the root releases the peers (from the root, staged: each then copies
// its block out of its staging).
func (e *Engine) fillRooted(j int, o, l uintptr) (syncKind, int) {
	p := &e.cur.plan
	a, n, me, c, chunk := &p.a, e.n, e.rank, p.a.Root, p.chunk
	op := OpOf(a.Func)
	staged, from := p.path == pathStaged, op.FromRoot()
	if j == 1 {
		if staged && me != c && from {
			e.cp.addTo(segStage1, a.Recv+hip.DevicePtr(o), e.stageBase, l)
		}
		return syncFromRoot, c
	}
	if me != c {
		if staged && !from {
			e.cp.addTo(segPre, e.stageBase, a.Send+hip.DevicePtr(o), l)
		}
		return syncToRoot, c
	}
	if !p.inPlace {
		e.cp.addTo(segLocal, a.Recv+op.BlockOff(SideRecv, c, chunk)+hip.DevicePtr(o), a.Send+op.BlockOff(SideSend, c, chunk)+hip.DevicePtr(o), l)
	}
	e.cp.seg(segStage1)
	for s := 1; s < n; s++ {
		q := (me + s) % n
		if from {
			e.cp.add(e.peerBlock(q, o), a.Send+op.BlockOff(SideSend, q, chunk)+hip.DevicePtr(o), l)
		} else {
			e.cp.add(a.Recv+op.BlockOff(SideRecv, q, chunk)+hip.DevicePtr(o), e.peerBlock(q, o), l)
		}
	}
	return syncToRoot, c
}

// peerBlock is where the root's copy meets peer q's block: q's recv (from
// the root), q's send for Gather (group), that buffer in the window (at
// the root's own offset, or in the in-place layout at buf + q*chunk), or
// q's staging.
func (e *Engine) peerBlock(q int, o uintptr) hip.DevicePtr {
	p := &e.cur.plan
	switch p.path {
	case pathGroup:
		if OpOf(p.a.Func).FromRoot() {
			return p.a.PeerRecv[q] + hip.DevicePtr(o)
		}
		return p.a.PeerSend[q] + hip.DevicePtr(o)
	case pathWindow:
		off := p.wOff
		if p.layout {
			off += uintptr(q) * p.chunk
		}
		return p.win.PeerBase(q) + hip.DevicePtr(off+o)
	}
	return e.stageWin.PeerBase(q)
}

// fillReleased: the rooted operations on the group path, where every
// rank knows the root's buffers. Step 0: the root releases the peers (its
// buffers are ready) and every rank copies its own block on its own
// stream (from the root's send, or into the root's recv), so the n
// copies run at once instead of one after another on the root's; step 1:
// the peers signal the root that they are done (docs/performance.md,
// "Hub and released rounds, in us").
func (e *Engine) fillReleased(j int) (syncKind, int) {
	p := &e.cur.plan
	a, me, c, chunk := &p.a, e.rank, p.a.Root, p.chunk
	op := OpOf(a.Func)
	if j == 1 {
		return syncToRoot, c
	}
	if op.FromRoot() {
		if src := a.PeerSend[c] + op.BlockOff(SideSend, me, chunk); src != a.Recv {
			e.cp.addTo(segStage1, a.Recv, src, chunk)
		}
	} else if dst := a.PeerRecv[c] + op.BlockOff(SideRecv, me, chunk); dst != a.Send {
		e.cp.addTo(segStage1, dst, a.Send, chunk)
	}
	return syncFromRoot, c
}

// chainMin is the smallest Broadcast that runs as a chain across devices:
// below it the n-1 extra syncs of the pipeline's fill cost more than the
// root's link gains. A variable so that tests can chain every size. Not
// yet measured on several GPUs.
var chainMin uintptr = 1 << 20

// useChain: a Broadcast of at least chainMin among three or more ranks
// not all on one device, where every rank can reach its successor's
// receive buffer (the group and window paths), runs as a chain, so that
// every link, the root's among them, carries each byte once: the root's
// memory is read once, not once per receiver. On one device every copy
// shares one memory, and the released and rooted plans are the faster.
// It depends on what every rank agrees on only.
func (e *Engine) useChain(p *plan) bool {
	return p.a.Func == FuncBroadcast && e.n > 2 && !e.c.OneDevice() && p.chunk >= chainMin &&
		(p.path == pathGroup || p.path == pathWindow)
}

// chainPiece is a chain's piece: the message in 4(n-1) pieces, so the
// fill (n-2 steps) is a fifth of the pipeline, of 256-byte multiples.
func (e *Engine) chainPiece(chunk uintptr) uintptr {
	k := uintptr(4 * (e.n - 1))
	return max(alignUp((chunk+k-1)/k, 256), 256)
}

// fillChain: Broadcast as a pipeline along the ring from the root. Every
// step is a full sync, then copies: the rank at position q of the chain
// (the root at 0) pushes piece i-q into its successor's receive buffer,
// from the root's send buffer or its own receive buffer, which got that
// piece from its predecessor a step before (the sync between orders the
// two). The root also copies its send into its receive at step 0. The
// last step holds the sync after the last piece only.
func (e *Engine) fillChain(i int) (syncKind, int) {
	p := &e.cur.plan
	a, n, me, chunk := &p.a, e.n, e.rank, p.chunk
	q := (me - a.Root + n) % n
	if i == 0 && q == 0 && a.Send != a.Recv {
		e.cp.addTo(segLocal, a.Recv, a.Send, chunk)
	}
	k := i - q
	if q == n-1 || k < 0 || uintptr(k)*p.piece >= chunk {
		return syncFull, 0
	}
	o := uintptr(k) * p.piece
	src := a.Recv
	if q == 0 {
		src = a.Send
	}
	next := (me + 1) % n
	dst := a.PeerRecv
	var to hip.DevicePtr
	if p.path == pathGroup {
		to = dst[next]
	} else {
		to = p.win.PeerBase(next) + hip.DevicePtr(p.wOff)
	}
	e.cp.addTo(segStage1, to+hip.DevicePtr(o), src+hip.DevicePtr(o), min(p.piece, chunk-o))
	return syncFull, 0
}

// rootOpens reports whether this plan's half syncs are round trips the
// root opens (its release, then the peers' signals), not the peers (their
// signals, then the release): released plans. Pairs keep the two apart
// (signal.go).
func (p *plan) rootOpens() bool { return p.kind == kindReleased }

// fillHub: rank 0 makes every copy of a small grouped AllGather or
// AlltoAll, in two batches whose order its stream keeps:
//   - AllGather: every rank's block into its recv, then that whole buffer
//     into every peer's recv (2n-1 copies, not n*n);
//   - AlltoAll: every send buffer into row r of its staging window, then
//     to each rank q its column q, as one 2D copy. In place is safe: every
//     send buffer is read before any recv is written.
func (e *Engine) fillHub(j int) (syncKind, int) {
	p := &e.cur.plan
	if j == 1 {
		return syncFromRoot, hubRoot
	}
	if e.rank != hubRoot {
		return syncToRoot, hubRoot
	}
	a, n, chunk := &p.a, e.n, p.chunk
	row := uintptr(n) * chunk
	e.cp.seg(segStage1)
	for r := range n {
		switch {
		case a.Func == FuncAlltoAll:
			e.cp.add(e.stageBase+hip.DevicePtr(uintptr(r)*row), a.PeerSend[r], row)
		case a.PeerSend[r] != a.Recv+hip.DevicePtr(uintptr(r)*chunk):
			e.cp.add(a.Recv+hip.DevicePtr(uintptr(r)*chunk), a.PeerSend[r], chunk)
		}
	}
	e.cp.seg(segStage2)
	for q := range n {
		switch {
		case a.Func == FuncAlltoAll:
			e.cp.add2D(a.PeerRecv[q], chunk, e.stageBase+hip.DevicePtr(uintptr(q)*chunk), row, chunk, uintptr(n))
		case q != hubRoot:
			e.cp.add(a.PeerRecv[q], a.Recv, row)
		}
	}
	return syncToRoot, hubRoot
}
