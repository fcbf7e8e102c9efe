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

// allGather: my block is recv + rank*chunk. Local copy send -> my block
// unless in place; then for r = 1..n-1 push send to peer (rank+r)%n at my
// block's offset (the rotation spreads the load).
func (e *Engine) allGather(a *Args, chunk uintptr, capturing bool) error {
	n, me, s := e.n, e.rank, a.Stream
	myOff := uintptr(me) * chunk
	myBlock := a.Recv + hip.DevicePtr(myOff)
	inPlace := a.Send == myBlock
	p, w := e.choose(a.PeerRecv, a.RecvWin, a.Recv, uintptr(n)*chunk)
	var wOff uintptr
	piece := chunk
	switch p {
	case pathWindow:
		var err error
		if wOff, err = inWindow(w, a.Recv, uintptr(n)*chunk); err != nil {
			return err
		}
	case pathStaged:
		var err error
		if piece, err = e.piece(n, chunk); err != nil {
			return err
		}
	}
	e.logPath(a.Func, p, chunk, piece)
	for o := uintptr(0); o < chunk; o += piece {
		l := min(piece, chunk-o)
		src := a.Send + hip.DevicePtr(o)
		e.resetCopies()
		for r := range n {
			e.slot(r)
			d := (me + r) % n
			if d == me {
				if !inPlace {
					e.add(myBlock+hip.DevicePtr(o), src, l)
				}
				continue
			}
			var dst hip.DevicePtr
			switch p {
			case pathGroup:
				dst = a.PeerRecv[d] + hip.DevicePtr(myOff+o)
			case pathWindow:
				dst = w.PeerBase(d) + hip.DevicePtr(wOff+myOff+o)
			default:
				dst = e.stageWin.PeerBase(d) + hip.DevicePtr(uintptr(me)*piece)
			}
			e.add(dst, src, l)
		}
		if err := e.launchRound(s, capturing, n, chunk, true); err != nil {
			return err
		}
		if p == pathStaged {
			e.resetCopies()
			for q := range n {
				if q != me {
					e.add(a.Recv+hip.DevicePtr(uintptr(q)*chunk+o), e.stageBase+hip.DevicePtr(uintptr(q)*piece), l)
				}
			}
			if err := e.copies(s, capturing, 0, len(e.dsts)); err != nil {
				return err
			}
		}
	}
	return nil
}

// alltoAll: for r = 0..n-1, d = (rank+r)%n: send + d*chunk -> recv +
// rank*chunk on rank d. In place (send == recv), peers write into the very
// blocks this rank still reads, so those blocks are first copied to
// scratch (the rank's own staging window, free on the direct paths) and
// pushed from there (B13); the staged path is safe as is, since received
// blocks land in staging and reach recv only after the last sync. Direct
// paths run in the same rounds as the staged one so that an in-place rank
// needs no more syncs than its peers.
func (e *Engine) alltoAll(a *Args, chunk uintptr, capturing bool) error {
	n, me, s := e.n, e.rank, a.Stream
	myOff := uintptr(me) * chunk
	inPlace := a.Send == a.Recv
	p, w := e.choose(a.PeerRecv, a.RecvWin, a.Recv, uintptr(n)*chunk)
	var wOff uintptr
	piece := chunk
	if p == pathWindow {
		var err error
		if wOff, err = inWindow(w, a.Recv, uintptr(n)*chunk); err != nil {
			return err
		}
	}
	if p != pathLocal {
		var err error
		if piece, err = e.piece(n, chunk); err != nil {
			return err
		}
	}
	scratch := inPlace && (p == pathGroup || p == pathWindow) && !seed.b13
	e.logPath(a.Func, p, chunk, piece)
	for o := uintptr(0); o < chunk; o += piece {
		l := min(piece, chunk-o)
		if scratch {
			e.resetCopies()
			for d := range n {
				if d != me {
					e.add(e.stageBase+hip.DevicePtr(uintptr(d)*piece), a.Send+hip.DevicePtr(uintptr(d)*chunk+o), l)
				}
			}
			if err := e.copies(s, capturing, 0, len(e.dsts)); err != nil {
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
					e.add(a.Recv+hip.DevicePtr(myOff+o), src, l)
				}
				continue
			}
			if scratch {
				src = e.stageBase + hip.DevicePtr(uintptr(d)*piece)
			}
			var dst hip.DevicePtr
			switch p {
			case pathGroup:
				dst = a.PeerRecv[d] + hip.DevicePtr(myOff+o)
			case pathWindow:
				dst = w.PeerBase(d) + hip.DevicePtr(wOff+myOff+o)
			default:
				dst = e.stageWin.PeerBase(d) + hip.DevicePtr(uintptr(me)*piece)
			}
			e.add(dst, src, l)
		}
		if err := e.launchRound(s, capturing, n, chunk, true); err != nil {
			return err
		}
		if p == pathStaged {
			e.resetCopies()
			for q := range n {
				if q != me {
					e.add(a.Recv+hip.DevicePtr(uintptr(q)*chunk+o), e.stageBase+hip.DevicePtr(uintptr(q)*piece), l)
				}
			}
			if err := e.copies(s, capturing, 0, len(e.dsts)); err != nil {
				return err
			}
		}
	}
	return nil
}

// scatter: only the root copies; rank d receives send + d*chunk into its
// recv. In place on the root means recv == send + root*chunk; every peer's
// destination is then its recv, at the offset of the root's recv in the
// window (B12: the seed added d*chunk again).
func (e *Engine) scatter(a *Args, chunk uintptr, capturing bool) error {
	n, me, s := e.n, e.rank, a.Stream
	root := me == a.Root
	inPlace := root && a.Recv == a.Send+hip.DevicePtr(uintptr(a.Root)*chunk)
	p, w := e.choose(a.PeerRecv, a.RecvWin, a.Recv, chunk)
	var wOff uintptr
	piece := chunk
	switch p {
	case pathWindow:
		var err error
		if wOff, err = inWindow(w, a.Recv, chunk); err != nil {
			return err
		}
	case pathStaged:
		var err error
		if piece, err = e.piece(1, chunk); err != nil {
			return err
		}
	}
	e.logPath(a.Func, p, chunk, piece)
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
						e.add(a.Recv+hip.DevicePtr(o), src, l)
					}
					continue
				}
				var dst hip.DevicePtr
				switch p {
				case pathGroup:
					dst = a.PeerRecv[d] + hip.DevicePtr(o)
				case pathWindow:
					off := wOff
					if seed.b12 && inPlace {
						off += uintptr(d) * chunk
					}
					dst = w.PeerBase(d) + hip.DevicePtr(off+o)
				default:
					dst = e.stageWin.PeerBase(d)
				}
				e.add(dst, src, l)
			}
		}
		if err := e.launchRound(s, capturing, n, chunk, false); err != nil {
			return err
		}
		if p == pathStaged && !root {
			e.resetCopies()
			e.add(a.Recv+hip.DevicePtr(o), e.stageBase, l)
			if err := e.copies(s, capturing, 0, 1); err != nil {
				return err
			}
		}
	}
	return nil
}

// gather: decided by the send buffer, meaningful on every rank (a non-root
// recv may be NULL). In a group every non-root pushes into the root's recv;
// otherwise the root pulls each peer's block, from the peer's send window
// at the same offset or from the staging window the peer filled by a local
// copy before the first sync, and the second sync releases the peers. The
// root copies its own block locally unless in place (send == recv +
// root*chunk).
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
	p, w := e.choose(peers, a.SendWin, a.Send, chunk)
	var wOff uintptr
	piece := chunk
	switch p {
	case pathGroup:
		if a.PeerRecv[a.Root] == 0 {
			return result.Errorf(result.InvalidArgument, "ce Gather: NULL recv buffer on root %d", a.Root)
		}
	case pathWindow:
		var err error
		if wOff, err = inWindow(w, a.Send, chunk); err != nil {
			return err
		}
	case pathStaged:
		var err error
		if piece, err = e.piece(1, chunk); err != nil {
			return err
		}
	}
	e.logPath(a.Func, p, chunk, piece)
	for o := uintptr(0); o < chunk; o += piece {
		l := min(piece, chunk-o)
		src := a.Send + hip.DevicePtr(o)
		e.resetCopies()
		if p == pathStaged && !root {
			e.add(e.stageBase, src, l)
			if err := e.copies(s, capturing, 0, 1); err != nil {
				return err
			}
			e.resetCopies()
		}
		switch {
		case root:
			for r := range n {
				e.slot(r)
				q := (me + r) % n
				dst := a.Recv + hip.DevicePtr(uintptr(q)*chunk+o)
				if q == me {
					if !inPlace {
						e.add(dst, src, l)
					}
					continue
				}
				switch p {
				case pathGroup:
					// The peers push; nothing to pull.
				case pathWindow:
					e.add(dst, w.PeerBase(q)+hip.DevicePtr(wOff+o), l)
				default:
					e.add(dst, e.stageWin.PeerBase(q), l)
				}
			}
		case p == pathGroup:
			e.slot(0)
			e.add(a.PeerRecv[a.Root]+hip.DevicePtr(uintptr(me)*chunk+o), src, l)
		}
		if err := e.launchRound(s, capturing, n, chunk, false); err != nil {
			return err
		}
	}
	return nil
}
