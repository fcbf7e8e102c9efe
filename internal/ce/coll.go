package ce

import (
	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// path is how a call reaches its peers' buffers.
type path int

const (
	// pathGroup: every rank's buffers are known (Args.PeerSend/PeerRecv).
	pathGroup path = iota
	// pathWindow: the deciding buffer is in a registered symmetric window;
	// peers' buffers are at the same offset of their windows (zero-copy).
	pathWindow
	// pathStaged: data goes through the internal staging window, in rounds
	// of at most StagingBytes per receiver.
	pathStaged
	// pathLocal: a single rank; nothing to reach.
	pathLocal
)

func (p path) String() string {
	switch p {
	case pathGroup:
		return "group"
	case pathWindow:
		return "zero-copy"
	case pathStaged:
		return "staged"
	}
	return "local"
}

// choose picks the path from the deciding buffer [p, p+size) and the
// window the caller named, if any. Every rank decides from its own buffer,
// which under the symmetric-registration contract gives the same answer on
// every rank (B11).
func (e *Engine) choose(peers []hip.DevicePtr, win Window, p hip.DevicePtr, size uintptr) (path, Window) {
	switch {
	case e.n == 1:
		return pathLocal, nil
	case peers != nil:
		return pathGroup, nil
	case win != nil:
		return pathWindow, win
	}
	if w, ok := e.c.FindWindow(p, size); ok {
		return pathWindow, w
	}
	return pathStaged, nil
}

// piece is the bytes of one block per round when blocks blocks share the
// staging window: whole when they fit, else a 256-byte multiple. It depends
// on n, chunk and the configuration only, so every rank runs the same
// rounds.
func (e *Engine) piece(blocks int, chunk uintptr) (uintptr, error) {
	per := e.stageSize / uintptr(blocks)
	if per >= 256 {
		per &^= 255
	}
	if per == 0 {
		return 0, result.Errorf(result.InvalidUsage, "ce: staging window of %d bytes too small for %d blocks", e.stageSize, blocks)
	}
	return min(per, chunk), nil
}

// inWindow is the offset of p in w, with a check that [p, p+n) lies in it.
func inWindow(w Window, p hip.DevicePtr, n uintptr) (uintptr, error) {
	if p < w.Base() || uintptr(p-w.Base()) > w.Size() || n > w.Size()-uintptr(p-w.Base()) {
		return 0, result.Errorf(result.InvalidArgument, "ce: buffer %#x+%d is not inside its window %#x+%d", uintptr(p), n, uintptr(w.Base()), w.Size())
	}
	return uintptr(p - w.Base()), nil
}

// route is how a call reaches its peers' buffers: the path, and for the
// zero-copy path the window and the deciding buffer's offset in it.
type route struct {
	p    path
	w    Window
	wOff uintptr
}

// route chooses the path from the deciding buffer [buf, buf+size) (see
// choose) and, on the zero-copy path, checks that it lies in its window.
func (e *Engine) route(peers []hip.DevicePtr, win Window, buf hip.DevicePtr, size uintptr) (route, error) {
	p, w := e.choose(peers, win, buf, size)
	rt := route{p: p, w: w}
	if p == pathWindow {
		var err error
		if rt.wOff, err = inWindow(w, buf, size); err != nil {
			return rt, err
		}
	}
	return rt, nil
}

// pushDst is where a push to peer lands: off bytes into the peer's recv
// buffer (its entry of a.PeerRecv, or the same offset of its window), or,
// on the staged path, slot bytes into the peer's staging window.
func (e *Engine) pushDst(a *Args, rt *route, peer int, off, slot uintptr) hip.DevicePtr {
	switch rt.p {
	case pathGroup:
		return a.PeerRecv[peer] + hip.DevicePtr(off)
	case pathWindow:
		return rt.w.PeerBase(peer) + hip.DevicePtr(rt.wOff+off)
	}
	return e.stageWin.PeerBase(peer) + hip.DevicePtr(slot)
}

// stagingCopies runs one batch of copies, for every peer q, between q's
// slot of this rank's staging window (stageBase + q*piece) and block q of
// buf (buf + q*chunk + o), l bytes each: out of staging into buf when out
// (the staged path's copy-out), else from buf into staging (AlltoAll's
// in-place scratch, B13).
func (e *Engine) stagingCopies(s hip.Stream, capturing, out bool, buf hip.DevicePtr, chunk, piece, o, l uintptr) error {
	e.resetCopies()
	for q := range e.n {
		if q == e.rank {
			continue
		}
		user := buf + hip.DevicePtr(uintptr(q)*chunk+o)
		slot := e.stageBase + hip.DevicePtr(uintptr(q)*piece)
		if out {
			e.add(user, slot, l)
		} else {
			e.add(slot, user, l)
		}
	}
	return e.copies(s, capturing, 0, len(e.dsts))
}

// copyOne runs a batch of the single copy of l bytes src -> dst.
func (e *Engine) copyOne(s hip.Stream, capturing bool, dst, src hip.DevicePtr, l uintptr) error {
	e.resetCopies()
	e.add(dst, src, l)
	return e.copies(s, capturing, 0, 1)
}

// pushRound runs the queued pushes of one AllGather or AlltoAll round (o
// bytes into each block, l bytes long); on the staged path it then copies
// the blocks the peers staged into recv.
func (e *Engine) pushRound(a *Args, p path, chunk, piece, o, l uintptr, capturing bool) error {
	if err := e.launchRound(a.Stream, capturing, e.n, chunk, true); err != nil {
		return err
	}
	if p != pathStaged {
		return nil
	}
	return e.stagingCopies(a.Stream, capturing, true, a.Recv, chunk, piece, o, l)
}

// allGather: my block is recv + rank*chunk. Local copy send -> my block
// unless in place; then for r = 1..n-1 push send to peer (rank+r)%n at my
// block's offset (the rotation spreads the load).
func (e *Engine) allGather(a *Args, chunk uintptr, capturing bool) error {
	n, me := e.n, e.rank
	myOff := uintptr(me) * chunk
	myBlock := a.Recv + hip.DevicePtr(myOff)
	inPlace := a.Send == myBlock
	rt, err := e.route(a.PeerRecv, a.RecvWin, a.Recv, uintptr(n)*chunk)
	if err != nil {
		return err
	}
	piece := chunk
	if rt.p == pathStaged {
		if piece, err = e.piece(n, chunk); err != nil {
			return err
		}
	}
	if e.useHub(a, rt.p, chunk) {
		return e.hubRound(a, chunk, capturing)
	}
	e.logPath(a.Func, rt.p, chunk, piece)
	for o := uintptr(0); o < chunk; o += piece {
		l := min(piece, chunk-o)
		src := a.Send + hip.DevicePtr(o)
		e.resetCopies()
		for r := range n {
			e.slot(r)
			d := (me + r) % n
			if d == me {
				if !inPlace {
					if err := e.addOwn(a.Stream, myBlock+hip.DevicePtr(o), src, l); err != nil {
						return err
					}
				}
				continue
			}
			e.add(e.pushDst(a, &rt, d, myOff+o, uintptr(me)*piece), src, l)
		}
		if err := e.pushRound(a, rt.p, chunk, piece, o, l, capturing); err != nil {
			return err
		}
	}
	return nil
}

// alltoAll: for r = 0..n-1, d = (rank+r)%n: send + d*chunk -> recv +
// rank*chunk on rank d. In place (send == recv), peers write into the very
// blocks this rank still reads, so those blocks are first copied to
// scratch (the rank's own staging window, free on the direct paths) and
// pushed from there (B13), in rounds of what scratch holds; the staged
// path is safe as is, since received blocks land in staging and reach recv
// only after the last sync. An out-of-place call on a direct path is one
// round whatever its size. So the number of rounds, hence of syncs,
// depends on being in place, which every rank must then be alike: NCCL
// has no in-place AlltoAll at all, cecoll requires it on every rank or on
// none (CECOLL_CHECK=1 reports a mix as a signature mismatch).
func (e *Engine) alltoAll(a *Args, chunk uintptr, capturing bool) error {
	n, me, s := e.n, e.rank, a.Stream
	myOff := uintptr(me) * chunk
	inPlace := a.Send == a.Recv
	rt, err := e.route(a.PeerRecv, a.RecvWin, a.Recv, uintptr(n)*chunk)
	if err != nil {
		return err
	}
	piece := chunk
	if rt.p == pathStaged || (inPlace && rt.p != pathLocal) {
		if piece, err = e.piece(n, chunk); err != nil {
			return err
		}
	}
	if e.useHub(a, rt.p, chunk) {
		return e.hubRound(a, chunk, capturing)
	}
	scratch := inPlace && (rt.p == pathGroup || rt.p == pathWindow) && !seed.b13
	e.logPath(a.Func, rt.p, chunk, piece)
	for o := uintptr(0); o < chunk; o += piece {
		l := min(piece, chunk-o)
		if scratch {
			if err := e.stagingCopies(s, capturing, false, a.Send, chunk, piece, o, l); err != nil {
				return err
			}
		}
		e.resetCopies()
		for r := range n {
			e.slot(r)
			d := (me + r) % n
			src := a.Send + hip.DevicePtr(uintptr(d)*chunk+o)
			if d == me {
				if !inPlace {
					if err := e.addOwn(s, a.Recv+hip.DevicePtr(myOff+o), src, l); err != nil {
						return err
					}
				}
				continue
			}
			if scratch {
				src = e.stageBase + hip.DevicePtr(uintptr(d)*piece)
			}
			e.add(e.pushDst(a, &rt, d, myOff+o, uintptr(me)*piece), src, l)
		}
		if err := e.pushRound(a, rt.p, chunk, piece, o, l, capturing); err != nil {
			return err
		}
	}
	return nil
}

// hubRoot is the rank that makes a hub round's copies.
const hubRoot = 0

// useHub reports whether a grouped AllGather or AlltoAll runs as a hub
// round (hubRound): where hub rounds are on (every rank on one device, a
// rooted sync), for at most Config.HubBytes of chunk*n, and for AlltoAll
// at most hubAlltoAllBytes with the n*n blocks fitting in the staging
// window. Every rank decides alike: a group gives every rank the same
// buffer lists, and n, chunk and the configuration are common.
func (e *Engine) useHub(a *Args, p path, chunk uintptr) bool {
	bytes := uint64(chunk) * uint64(e.n)
	if !e.hub || p != pathGroup || a.PeerSend == nil || bytes > uint64(e.cfg.HubBytes) {
		return false
	}
	return a.Func != FuncAlltoAll || (bytes <= hubAlltoAllBytes && bytes*uint64(e.n) <= uint64(e.stageSize))
}

// hubRound runs a small AllGather or AlltoAll as a rooted round at
// hubRoot (arriveAt, the copies, releaseFrom), which makes every copy
// while the peers only announce their arrival and wait for the release:
// two hops of flags instead of the four of two full star syncs. On one
// device every copy runs on the same copy engines wherever it is issued,
// but the root's run one after another, about 0.7 us each when small, so
// it makes 2n or fewer (hubCopies), not one per block (n*n).
func (e *Engine) hubRound(a *Args, chunk uintptr, capturing bool) error {
	e.logHub(a.Func, chunk)
	e.resetCopies()
	if e.evr.stepping {
		if e.rank != hubRoot {
			return nil
		}
		if err := e.evWait(a.Stream); err != nil {
			return err
		}
		return e.hubCopies(a, chunk, capturing)
	}
	if err := e.arriveAt(a.Stream, capturing, hubRoot); err != nil {
		return err
	}
	if e.rank == hubRoot {
		if err := e.hubCopies(a, chunk, capturing); err != nil {
			return err
		}
	}
	return e.releaseFrom(a.Stream, capturing, hubRoot)
}

// hubCopies makes a hub round's copies, in two stages on the root's
// stream (the copies of one batch have no order, the batches do):
//
//   - AllGather: gather every rank's block into my recv buffer (n copies,
//     none for an in-place block of mine), then copy that whole buffer
//     into every peer's recv (n-1 copies).
//   - AlltoAll: copy every rank's send buffer into row r of my staging
//     window (n copies), then to each rank q its column q, block q of
//     every row, as one 2D copy (n copies). In place is safe: every send
//     buffer is read before any recv is written.
//
// The staging window is free here: peers write it only between the
// syncs of a staged collective, and my arrival wait orders this round
// after the previous collective on every rank.
func (e *Engine) hubCopies(a *Args, chunk uintptr, capturing bool) error {
	n, s := e.n, a.Stream
	row := uintptr(n) * chunk
	for r := range n {
		switch {
		case a.Func == FuncAlltoAll:
			e.add(e.stageBase+hip.DevicePtr(uintptr(r)*row), a.PeerSend[r], row)
		case a.PeerSend[r] != a.Recv+hip.DevicePtr(uintptr(r)*chunk):
			e.add(a.Recv+hip.DevicePtr(uintptr(r)*chunk), a.PeerSend[r], chunk)
		}
	}
	if err := e.copies(s, capturing, 0, len(e.dsts)); err != nil {
		return err
	}
	if a.Func == FuncAlltoAll {
		for q := range n {
			if err := e.rt.Memcpy2DAsync(a.PeerRecv[q], chunk, e.stageBase+hip.DevicePtr(uintptr(q)*chunk), row, chunk, uintptr(n), s); err != nil {
				return err
			}
		}
		return nil
	}
	e.resetCopies()
	for q := range n {
		if q != hubRoot {
			e.add(a.PeerRecv[q], a.Recv, row)
		}
	}
	return e.copies(s, capturing, 0, len(e.dsts))
}

// scatter: rank d receives send + d*chunk into its recv. The root copies
// every block, except in a group with every rank on one device, where each
// rank pulls its own (releasedRound). In place on the root means recv ==
// send + root*chunk; every peer's destination is then its recv, at the
// offset of the root's recv in the window (B12: the seed added d*chunk
// again).
func (e *Engine) scatter(a *Args, chunk uintptr, capturing bool) error {
	n, me, s := e.n, e.rank, a.Stream
	root := me == a.Root
	inPlace := root && a.Recv == a.Send+hip.DevicePtr(uintptr(a.Root)*chunk)
	rt, err := e.route(a.PeerRecv, a.RecvWin, a.Recv, chunk)
	if err != nil {
		return err
	}
	piece := chunk
	if rt.p == pathStaged {
		if piece, err = e.piece(1, chunk); err != nil {
			return err
		}
	}
	e.logPath(a.Func, rt.p, chunk, piece)
	if rt.p == pathGroup && e.oneDev {
		// Every rank pulls its block (releasedRound); the root's in-place
		// block is already there.
		e.resetCopies()
		if src := a.PeerSend[a.Root] + hip.DevicePtr(uintptr(me)*chunk); src != a.Recv {
			e.add(a.Recv, src, chunk)
		}
		return e.releasedRound(s, capturing, a.Root)
	}
	for o := uintptr(0); o < chunk; o += piece {
		l := min(piece, chunk-o)
		e.resetCopies()
		if root {
			for r := range n {
				e.slot(r)
				d := (me + r) % n
				src := a.Send + hip.DevicePtr(uintptr(d)*chunk+o)
				if d == me {
					if !inPlace {
						if err := e.addOwn(s, a.Recv+hip.DevicePtr(o), src, l); err != nil {
							return err
						}
					}
					continue
				}
				off := o
				if seed.b12 && inPlace && rt.p == pathWindow {
					off += uintptr(d) * chunk
				}
				e.add(e.pushDst(a, &rt, d, off, 0), src, l)
			}
		}
		if err := e.rootedRound(s, capturing, a.Root, n); err != nil {
			return err
		}
		if rt.p == pathStaged && !root {
			if err := e.copyOne(s, capturing, a.Recv+hip.DevicePtr(o), e.stageBase, l); err != nil {
				return err
			}
		}
	}
	return nil
}

// gather: decided by the send buffer, meaningful on every rank (a non-root
// recv may be NULL). In a group with every rank on one device each rank
// pushes its block into the root's recv (releasedRound); otherwise the root
// pulls each peer's block: from the peer's send buffer in a group (with the
// seed's all-pairs sync every non-root pushes into the root's recv
// instead), from the peer's send window at the same offset or from the
// staging window the peer filled by a local copy before the first sync,
// and the second sync releases the peers. The root copies its own block
// locally unless in place (send == recv + root*chunk).
func (e *Engine) gather(a *Args, chunk uintptr, capturing bool) error {
	n, me, s := e.n, e.rank, a.Stream
	root := me == a.Root
	if seed.b11 && !root && a.Recv == 0 {
		// The seed let each rank decide alone whether the call can run on
		// copy engines; a NULL non-root recv made this rank leave while the
		// root went on.
		return result.Errorf(result.InvalidUsage, "ce Gather: rank %d has no registered recv buffer (seed eligibility)", me)
	}
	inPlace := root && a.Send == a.Recv+hip.DevicePtr(uintptr(a.Root)*chunk)
	peers := a.PeerSend
	if a.PeerRecv == nil {
		peers = nil
	}
	rt, err := e.route(peers, a.SendWin, a.Send, chunk)
	if err != nil {
		return err
	}
	piece := chunk
	switch rt.p {
	case pathGroup:
		if a.PeerRecv[a.Root] == 0 {
			return result.Errorf(result.InvalidArgument, "ce Gather: NULL recv buffer on root %d", a.Root)
		}
	case pathStaged:
		if piece, err = e.piece(1, chunk); err != nil {
			return err
		}
	}
	e.logPath(a.Func, rt.p, chunk, piece)
	if rt.p == pathGroup && e.oneDev {
		// Every rank pushes its block (releasedRound); the root's in-place
		// block is already there.
		e.resetCopies()
		if dst := a.PeerRecv[a.Root] + hip.DevicePtr(uintptr(me)*chunk); dst != a.Send {
			e.add(dst, a.Send, chunk)
		}
		return e.releasedRound(s, capturing, a.Root)
	}
	for o := uintptr(0); o < chunk; o += piece {
		l := min(piece, chunk-o)
		src := a.Send + hip.DevicePtr(o)
		if rt.p == pathStaged && !root {
			if err := e.copyOne(s, capturing, e.stageBase, src, l); err != nil {
				return err
			}
		}
		e.resetCopies()
		switch {
		case root:
			for r := range n {
				e.slot(r)
				q := (me + r) % n
				dst := a.Recv + hip.DevicePtr(uintptr(q)*chunk+o)
				if q == me {
					if !inPlace {
						if err := e.addOwn(s, dst, src, l); err != nil {
							return err
						}
					}
					continue
				}
				switch rt.p {
				case pathGroup:
					if e.rooted {
						e.add(dst, a.PeerSend[q]+hip.DevicePtr(o), l)
					} // else the peers push
				case pathWindow:
					e.add(dst, rt.w.PeerBase(q)+hip.DevicePtr(rt.wOff+o), l)
				default:
					e.add(dst, e.stageWin.PeerBase(q), l)
				}
			}
		case rt.p == pathGroup && !e.rooted:
			e.slot(0)
			e.add(a.PeerRecv[a.Root]+hip.DevicePtr(uintptr(me)*chunk+o), src, l)
		}
		if err := e.rootedRound(s, capturing, a.Root, n); err != nil {
			return err
		}
	}
	return nil
}
