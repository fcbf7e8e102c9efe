package ce

import (
	"unsafe"

	"cecoll/internal/hip"
)

// copyWords writes w to device memory at p (synchronous; Init only).
func copyWords(rt hip.Runtime, p hip.DevicePtr, w []uint32) error {
	b := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*4)
	return hip.CopyToDevice(rt, p, b)
}

// Flag waits are cyclic GEQ waits (hold when int32(*slot - v) >= 0), not
// the seed's EQ waits, so that Abort can release every queued wait at once
// by writing releaseValue into the local slots. For the protocol GEQ is
// EQ: every sync, eager or captured, resets my whole array to 0 right after
// its waits, so a slot holds 0 or the value a peer wrote for the sync now
// waiting (alternating arrays keep a peer at most one sync ahead: it
// writes this array again only after passing the next sync on the other
// one, which needs my write there, which my stream issues after the reset).
// A value therefore needs no identity: every sync, eager or captured,
// announces the constant 1 (graphSyncValue), which a copied flag copies
// from one device word, and ranks that write flags by different methods
// agree. The seed announced a fresh sequence number per eager sync and
// reset nothing eagerly: its graph's GEQ 1 passed on the value a previous
// eager call left (B10), and its counter wrapped onto 0 and 1 (B18). The
// sequence survives only for the seed modes of those regression tests.

// seqLimit bounds the seed modes' eager values to [2, 2^31); the counter
// goes from seqLimit-1 back to 2, skipping 0 (the reset value) and 1 (the
// graph constant) unless seed.b18.
const seqLimit = 1 << 31

// releaseValue satisfies every wait the engine queues: GEQ v for every v in
// [1, 2^31). Abort writes it into every local slot.
const releaseValue = seqLimit - 1

// seedFlags restores the seed's flag protocol (EQ waits, eager syncs
// leave their values in the arrays) for the regression tests whose defect
// only shows with it: under GEQ with resets a stale or overwritten value no
// longer hangs or releases a wait (B4, B10, B19).
func seedFlags() bool { return seed.b4 || seed.b10 || seed.b19 }

// seqFlags reports whether eager syncs announce sequence values (the seed
// modes above and B18's) instead of the constant 1.
func seqFlags() bool { return seedFlags() || seed.b18 }

// nextSeq returns the next eager flag value. Init starts the counter at 1,
// so the first value is 2.
func (e *Engine) nextSeq() uint32 {
	e.seq++
	if (e.seq == 0 || e.seq >= seqLimit) && !seed.b18 {
		e.seq = 2
	}
	return e.seq
}

// waitOp and writeOp build memop entries with their type set explicitly
// (B1: the seed left it 0, an invalid operation).
func waitOp(addr hip.DevicePtr, v uint32) hip.MemOp {
	cond := hip.WaitGEQ
	if seedFlags() {
		cond = hip.WaitEQ
	}
	op := hip.WaitValue32(addr, v, cond)
	if seed.b1 {
		op.Op = hip.MemOpInvalid
	}
	return op
}

func writeOp(addr hip.DevicePtr, v uint32) hip.MemOp {
	op := hip.WriteValue32(addr, v)
	if seed.b1 {
		op.Op = hip.MemOpInvalid
	}
	return op
}

// submit enqueues e.ops on s in batches of at most 255 entries (B7).
func (e *Engine) submit(s hip.Stream) error {
	if len(e.ops) == 0 {
		return nil
	}
	var err error
	if seed.b7 {
		err = e.rt.StreamBatchMemOp(s, e.ops)
	} else {
		err = hip.BatchMemOps(e.rt, s, e.ops)
	}
	e.ops = e.ops[:0]
	return err
}

// sync is ncclMemOpSync: every rank announces that it reached this point
// of the collective and waits until every peer has. The value announced is
// the constant 1 (see the GEQ note above); every wait is followed by a
// reset of the slot to 0. Syncs alternate between the ready and the
// complete array, so a fast peer never overwrites a slot its partner has
// not yet seen. Two algorithms (Config.Sync), both with those rules:
//
//   - all pairs (the seed's): I write my slot in every peer's array (or
//     once to the multicast address of my slot) and wait for every peer's
//     slot in mine;
//   - star: a rank other than 0 writes its arrival in rank 0's array and
//     waits for rank 0's release in slot 0 of its own; rank 0 waits for
//     every arrival, writes the release into every peer's array, and only
//     then resets its waited slots (off the path the peers wait on). The
//     alternation argument holds hop by hop: a peer writes rank 0's array
//     again two syncs later, after rank 0's release of the sync in
//     between, which rank 0's stream issues after this reset; rank 0
//     writes a peer's array again after that peer's next arrival, which
//     the peer's stream issues after its reset. The arrivals are byte
//     lanes (see laneWords), written by 1-byte copies whatever the
//     flag-write method: rank 0 waits for one word per four peers instead
//     of one per peer. The releases follow the flag-write method, except
//     under rootRel (every rank on one device, in one process): there
//     rank 0 releases everyone with one local copy of ones into release
//     words in its own array, each peer waits on its word there and resets
//     it. Rank 0 writes that word again only after the peer's next arrival
//     on the same array, which the peer issues after the reset. (Rank 0
//     cannot reset the words for its peers off their path: its reset of
//     the other array's words would have to precede its release of this
//     one, or a released peer could find the next sync's word still set;
//     TestSyncAlgorithms caught that under chaos.)
func (e *Engine) sync(s hip.Stream, capturing bool) error {
	if e.n == 1 {
		return nil
	}
	arr := uintptr(0)
	if e.useCompl {
		arr = e.complOff
	}
	e.useCompl = !e.useCompl
	val := uint32(graphSyncValue)
	if !capturing && seqFlags() {
		val = e.nextSeq()
	}
	if seed.b6 && !e.mcTried {
		// The seed created the multicast team lazily, at the first sync
		// and without a barrier, and also for two ranks.
		e.mcTried = true
		if e.caps.Multicast {
			mc, err := e.rt.MulticastCreate(e.members, e.syncSize)
			if err != nil {
				return err
			}
			e.mc = mc
		}
	}
	local := e.syncBase + hip.DevicePtr(arr)
	e.ops = e.ops[:0]
	if !e.star {
		// Announce my slot everywhere, then wait for every peer's.
		if err := e.announce(s, capturing, arr, e.rank, -1, val); err != nil {
			return err
		}
		e.waits(local, -1, val)
		return e.resets(s, capturing, local, -1)
	}
	if e.rank != 0 { // star
		// My arrival: one byte into my lane of rank 0's array, a copy
		// whatever the flag-write method (a write-value has 4 bytes).
		dst := e.syncWin.PeerBase(0) + hip.DevicePtr(arr+uintptr(e.rank-1))
		if err := e.rt.MemcpyAsync(dst, e.words+wordGraph, 1, s); err != nil {
			return err
		}
		e.waits(local, 0, val)
		return e.resets(s, capturing, local, 0)
	}
	// Rank 0: gather every arrival, release everyone, then reset.
	e.waits(local, -1, val)
	if e.caps.SplitWaitReset {
		// HIP may let later writes of a batch overtake its waits.
		if err := e.submit(s); err != nil {
			return err
		}
	}
	if e.rootRel {
		if err := e.submit(s); err != nil {
			return err
		}
		rel := local + hip.DevicePtr(laneWords(e.n)*4)
		if err := e.rt.MemcpyAsync(rel, e.words+wordOnes, uintptr(e.n-1)*4, s); err != nil {
			return err
		}
	} else if err := e.announce(s, capturing, arr, 0, -1, val); err != nil {
		return err
	}
	return e.resets(s, capturing, local, -1)
}

// waitWords returns the words of the array at offset arr that this rank's
// waits watch: every slot of mine (all pairs), rank 0's lane words, a
// peer's slot 0, or under rootRel a peer's release word in rank 0's array.
// Abort writes releaseValue into exactly these (it allocates: Abort only).
func (e *Engine) waitWords(arr uintptr) []hip.DevicePtr {
	local := e.syncBase + hip.DevicePtr(arr)
	var out []hip.DevicePtr
	switch {
	case !e.star:
		for r := range e.n {
			out = append(out, local+hip.DevicePtr(r*4))
		}
	case e.rank == 0:
		for k := range laneWords(e.n) {
			out = append(out, local+hip.DevicePtr(k*4))
		}
	case e.rootRel:
		out = append(out, e.relWord(arr))
	default:
		out = append(out, local)
	}
	return out
}

// zeros is the device source of a rootRel reset: words of 0 after the
// ones in Engine.words.
func (e *Engine) zeros() hip.DevicePtr { return e.words + hip.DevicePtr(wordOnes+4*e.n) }

// relWord is this peer's release word in rank 0's array at offset arr
// (rootRel).
func (e *Engine) relWord(arr uintptr) hip.DevicePtr {
	return e.syncWin.PeerBase(0) + hip.DevicePtr(arr+uintptr(laneWords(e.n)+e.rank-1)*4)
}

// laneByte is the value a peer copies into its byte lane: the low byte of
// the graph constant 1 in Engine.words.
const laneByte = graphSyncValue

// laneWords returns the number of 32-bit words that hold the n-1 arrival
// lanes of a star sync (peer r writes byte r-1 of rank 0's array).
func laneWords(n int) int { return (n - 1 + 3) / 4 }

// lanePattern is the value lane word k holds once all its lanes are
// written. A partial word is numerically below it and every value stays
// below 2^31, so the cyclic GEQ wait on it holds exactly when every lane is
// in (or Abort's releaseValue is there).
func lanePattern(n, k int) uint32 {
	v := uint32(0)
	for b := 0; b < 4 && 4*k+b < n-1; b++ {
		v |= laneByte << (8 * b)
	}
	return v
}

// announce writes val into slot of array arr (ready or complete) of rank
// to, or of every peer when to < 0 (one write to the multicast address
// where there is one). By write-value, or by 4-byte copies of the device
// word that holds the constant 1 (e.flagCopy, B4, B5; a device word set to
// the value in the seed modes). Ops queued in e.ops before the call are
// submitted first, in order.
func (e *Engine) announce(s hip.Stream, capturing bool, arr uintptr, slot, to int, val uint32) error {
	off := hip.DevicePtr(arr + uintptr(slot)*4)
	if !e.flagCopy && !(seed.b4 && e.mc != 0) {
		switch {
		case e.mc != 0 && to < 0:
			e.ops = append(e.ops, writeOp(e.mc+off, val))
		case to >= 0:
			e.ops = append(e.ops, writeOp(e.syncWin.PeerBase(to)+off, val))
		default:
			for r := range e.n {
				if r != e.rank {
					e.ops = append(e.ops, writeOp(e.syncWin.PeerBase(r)+off, val))
				}
			}
		}
		return nil
	}
	src := e.words + wordGraph
	if !capturing && seqFlags() {
		if seed.b4 && e.mc != 0 {
			// The seed copied the value from the host (a stack variable);
			// the copy may run after the value changed.
			e.hostSeq = val
			src = hip.DevicePtr(unsafe.Pointer(&e.hostSeq))
		} else {
			// A sequence value is first published in a device word by a
			// local write-value; stream order keeps the next sync's
			// write behind these copies.
			src = e.words + wordSeq
			e.ops = append(e.ops, writeOp(src, val))
		}
	}
	if err := e.submit(s); err != nil {
		return err
	}
	switch {
	case e.mc != 0 && to < 0:
		return e.rt.MemcpyAsync(e.mc+off, src, 4, s)
	case to >= 0:
		return e.rt.MemcpyAsync(e.syncWin.PeerBase(to)+off, src, 4, s)
	}
	for r := range e.n {
		if r == e.rank {
			continue
		}
		if err := e.rt.MemcpyAsync(e.syncWin.PeerBase(r)+off, src, 4, s); err != nil {
			return err
		}
	}
	return nil
}

// waits queues the waits for slot from of my array at local (every peer's
// slot when from < 0; the lane words instead at rank 0 of a star, my
// release word in rank 0's array under rootRel).
func (e *Engine) waits(local hip.DevicePtr, from int, val uint32) {
	if e.star && e.rank == 0 {
		for k := range laneWords(e.n) {
			e.ops = append(e.ops, waitOp(local+hip.DevicePtr(k*4), lanePattern(e.n, k)))
		}
		return
	}
	if e.rootRel {
		e.ops = append(e.ops, waitOp(e.relWord(uintptr(local-e.syncBase)), val))
		return
	}
	for r := range e.n {
		if r != e.rank && (from < 0 || r == from) {
			e.ops = append(e.ops, waitOp(local+hip.DevicePtr(r*4), val))
		}
	}
}

// resets queues the reset to 0 of every slot waits waited for (not under
// the seed's eager flag protocol) and submits everything queued.
func (e *Engine) resets(s hip.Stream, capturing bool, local hip.DevicePtr, from int) error {
	if !capturing && seedFlags() {
		return e.submit(s)
	}
	if e.caps.SplitWaitReset {
		// HIP may let later writes of a batch overtake its waits.
		if err := e.submit(s); err != nil {
			return err
		}
	}
	if e.star && e.rank == 0 {
		for k := range laneWords(e.n) {
			e.ops = append(e.ops, writeOp(local+hip.DevicePtr(k*4), 0))
		}
		return e.submit(s)
	}
	if e.rootRel {
		w := e.relWord(uintptr(local - e.syncBase))
		if !e.flagCopy {
			e.ops = append(e.ops, writeOp(w, 0))
			return e.submit(s)
		}
		// A word of rank 0's: by copy, like every write into a peer's
		// window with copied flags.
		if err := e.submit(s); err != nil {
			return err
		}
		return e.rt.MemcpyAsync(w, e.zeros(), 4, s)
	}
	for r := range e.n {
		if r != e.rank && (from < 0 || r == from) {
			e.ops = append(e.ops, writeOp(local+hip.DevicePtr(r*4), 0))
		}
	}
	return e.submit(s)
}
