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
//
// A rank copies its held-back own block (addOwn: a large one) where it
// would otherwise wait: after its arrival, before its waits.
//
// Scatter and Gather use half syncs instead (rootedRound).
func (e *Engine) sync(s hip.Stream, capturing bool) error {
	if e.n == 1 {
		return e.flushOwn(s)
	}
	arr, val := e.nextArray(capturing)
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
		if err := e.flushOwn(s); err != nil {
			return err
		}
		e.gatherArrivals(local, val)
		return e.resetArrivals(s, capturing, local)
	}
	if e.rank != 0 { // star
		if err := e.arrive(s, arr, 0); err != nil {
			return err
		}
		if err := e.flushOwn(s); err != nil {
			return err
		}
		e.awaitRelease(arr, 0, val)
		return e.resetRelease(s, capturing, arr, 0)
	}
	// Rank 0: gather every arrival, release everyone, then reset.
	if err := e.flushOwn(s); err != nil {
		return err
	}
	e.gatherArrivals(local, val)
	if e.caps.SplitWaitReset {
		// HIP may let later writes of a batch overtake its waits.
		if err := e.submit(s); err != nil {
			return err
		}
	}
	if err := e.releasePeers(s, capturing, arr, val); err != nil {
		return err
	}
	return e.resetArrivals(s, capturing, local)
}

// rootedRound runs a round of Scatter or Gather, whose copies only the
// root c makes (it pushes to, or pulls from, every peer), between two half
// syncs at c instead of two full syncs: on the ready array every peer
// announces its arrival to c alone (its buffers are ready) and c waits for
// them and resets at once; c makes the copies; on the complete array c
// releases every peer (its buffers are done) and each waits for that and
// resets. A peer waits for nothing before its arrival and c for nothing
// after its copies, which run on its own stream: two hops of flags on the
// collective's path instead of four, and n-1 arrivals and n-1 releases
// instead of two syncs' worth. The arrays keep the layout of the
// configured algorithm: all pairs, a peer writes its slot in c's array
// and c its slot in the peer's; star, a peer writes its byte lane in c's
// array (lane = its distance after c, minus 1) and c writes slot 0 of the
// peer's (under rootRel, one copy of ones into release words in its own
// array).
//
// Why the arrays stay safe whatever the next collective and its root: a
// word is written again only after its waiter reset it. An arrival word
// of c is reset by c before its release of the same round, and a peer
// writes to c again only after waiting for that release (a full star sync
// also resets rank 0's arrivals before its next release). A release word
// of a peer is reset by the peer before its next arrival, and any
// coordinator writes it again only after waiting for that arrival. Slot 0
// of a star's array serves as lane word 0 when its rank coordinates and
// as its release word when not; one use ends with its reset before the
// other begins, by the same two rules. The round has two syncs, so the
// next collective starts on the ready array as always (B8).
//
// TestBackToBack runs random sequences of collectives and roots under
// chaos without a host barrier in between.
func (e *Engine) rootedRound(s hip.Stream, capturing bool, c, nSlots int) error {
	if !e.rooted || e.n == 1 {
		return e.launchRound(s, capturing, nSlots, 0, false)
	}
	if err := e.arriveAt(s, capturing, c); err != nil {
		return err
	}
	if e.rank == c {
		if err := e.copies(s, capturing, 0, len(e.dsts)); err != nil {
			return err
		}
	}
	return e.releaseFrom(s, capturing, c)
}

// releasedRound is a rooted round in the other order, for a grouped
// Scatter or Gather with every rank on one device, where every rank knows
// the root's buffers: on the ready array c releases every peer (its
// buffers are ready) and each waits for that and resets; every rank then
// copies its own block on its own stream (Scatter: a peer pulls its block
// from c's send buffer; Gather: it pushes its block into c's recv); on the
// complete array every peer announces its arrival (its copy is done) and c
// waits and resets. The copies run on n streams at once instead of one
// after another on c's: on one H200 a 64 MiB Gather at 4 ranks took
// 147-151 us eager and 138-139 as a graph replay, against 159-160 and 148
// with the root's chain (rootedRound); at 8 B, 13.7-14.7 us against 16.2.
//
// The arrays stay safe with rooted rounds (rootedRound), full syncs and
// hub rounds in any order, by the rule rootedRound states: a word is
// written again only after its waiter reset it. Here a peer resets its
// release word before its arrival of the same round, which c waits for
// before it can release anyone again; c resets its arrival words right
// after its wait, before its next release, which a peer waits for before
// its next arrival on any of c's arrays. The words are disjoint from a
// rootedRound's (its arrivals use c's ready array, its releases the
// complete one) except where a full sync uses them too, and a full sync
// waits for every peer.
func (e *Engine) releasedRound(s hip.Stream, capturing bool, c int) error {
	if e.evr.stepping {
		if err := e.evWait(s); err != nil {
			return err
		}
		return e.copies(s, capturing, 0, len(e.dsts))
	}
	if err := e.releaseFrom(s, capturing, c); err != nil {
		return err
	}
	if err := e.copies(s, capturing, 0, len(e.dsts)); err != nil {
		return err
	}
	return e.arriveAt(s, capturing, c)
}

// arriveAt is the first half sync of a rooted round (the second of a
// releasedRound): peers announce, c gathers and resets.
func (e *Engine) arriveAt(s hip.Stream, capturing bool, c int) error {
	arr, val := e.nextArray(capturing)
	e.ops = e.ops[:0]
	if e.rank != c {
		if e.star {
			return e.arrive(s, arr, c)
		}
		if err := e.announce(s, capturing, arr, e.rank, c, val); err != nil {
			return err
		}
		return e.submit(s)
	}
	if err := e.flushOwn(s); err != nil {
		return err
	}
	local := e.syncBase + hip.DevicePtr(arr)
	e.gatherArrivals(local, val)
	return e.resetArrivals(s, capturing, local)
}

// releaseFrom is the second half sync of a rooted round (the first of a
// releasedRound): c releases, the peers wait and reset.
func (e *Engine) releaseFrom(s hip.Stream, capturing bool, c int) error {
	arr, val := e.nextArray(capturing)
	e.ops = e.ops[:0]
	if e.rank == c {
		if err := e.releasePeers(s, capturing, arr, val); err != nil {
			return err
		}
		return e.submit(s)
	}
	e.awaitRelease(arr, c, val)
	return e.resetRelease(s, capturing, arr, c)
}

// nextArray returns the offset of the array the next sync uses, flipping
// the alternation, and the value it announces.
func (e *Engine) nextArray(capturing bool) (uintptr, uint32) {
	arr := uintptr(0)
	if e.useCompl {
		arr = e.complOff
	}
	e.useCompl = !e.useCompl
	val := uint32(graphSyncValue)
	if !capturing && seqFlags() {
		val = e.nextSeq()
	}
	return arr, val
}

// rel is my distance after coordinator c (1..n-1).
func (e *Engine) rel(c int) int { return (e.rank - c + e.n) % e.n }

// relSlot is the slot of a peer's array where coordinator c releases it:
// c's own slot under all pairs, slot 0 under star.
func (e *Engine) relSlot(c int) int {
	if e.star {
		return 0
	}
	return c
}

// arrive is a star arrival: one byte into my lane of coordinator c's
// array at offset arr, a copy whatever the flag-write method (a
// write-value has 4 bytes).
func (e *Engine) arrive(s hip.Stream, arr uintptr, c int) error {
	dst := e.syncWin.PeerBase(c) + hip.DevicePtr(arr+uintptr(e.rel(c)-1))
	return e.rt.MemcpyAsync(dst, e.words+wordGraph, 1, s)
}

// gatherArrivals queues a coordinator's waits for every peer's arrival in
// my array at local: the lane words (star), every peer's slot (all pairs).
func (e *Engine) gatherArrivals(local hip.DevicePtr, val uint32) {
	if e.star {
		for k := range laneWords(e.n) {
			e.ops = append(e.ops, waitOp(local+hip.DevicePtr(k*4), lanePattern(e.n, k)))
		}
		return
	}
	for r := range e.n {
		if r != e.rank {
			e.ops = append(e.ops, waitOp(local+hip.DevicePtr(r*4), val))
		}
	}
}

// resetArrivals queues the reset to 0 of what gatherArrivals waited for
// (not under the seed's eager flag protocol) and submits everything queued.
func (e *Engine) resetArrivals(s hip.Stream, capturing bool, local hip.DevicePtr) error {
	if !capturing && seedFlags() {
		return e.submit(s)
	}
	if e.caps.SplitWaitReset {
		// HIP may let later writes of a batch overtake its waits.
		if err := e.submit(s); err != nil {
			return err
		}
	}
	if e.star {
		for k := range laneWords(e.n) {
			e.ops = append(e.ops, writeOp(local+hip.DevicePtr(k*4), 0))
		}
		return e.submit(s)
	}
	for r := range e.n {
		if r != e.rank {
			e.ops = append(e.ops, writeOp(local+hip.DevicePtr(r*4), 0))
		}
	}
	return e.submit(s)
}

// releasePeers releases every peer as coordinator, in the array at offset
// arr: under rootRel one local copy of ones into the release words of my
// array, else my release slot in every peer's array (announce; write-value
// ops may stay queued).
func (e *Engine) releasePeers(s hip.Stream, capturing bool, arr uintptr, val uint32) error {
	if !e.rootRel {
		return e.announce(s, capturing, arr, e.relSlot(e.rank), -1, val)
	}
	if err := e.submit(s); err != nil {
		return err
	}
	rel := e.syncBase + hip.DevicePtr(arr+uintptr(laneWords(e.n))*4)
	return e.rt.MemcpyAsync(rel, e.words+wordOnes, uintptr(e.n-1)*4, s)
}

// releaseWord is the word where coordinator c releases me in the array at
// offset arr: my word in c's array under rootRel, else my release slot.
func (e *Engine) releaseWord(arr uintptr, c int) hip.DevicePtr {
	if e.rootRel {
		return e.syncWin.PeerBase(c) + hip.DevicePtr(arr+uintptr(laneWords(e.n)+e.rel(c)-1)*4)
	}
	return e.syncBase + hip.DevicePtr(arr+uintptr(e.relSlot(c))*4)
}

// awaitRelease queues my wait for coordinator c's release.
func (e *Engine) awaitRelease(arr uintptr, c int, val uint32) {
	e.ops = append(e.ops, waitOp(e.releaseWord(arr, c), val))
}

// resetRelease queues the reset of my release word (not under the seed's
// eager flag protocol) and submits everything queued.
func (e *Engine) resetRelease(s hip.Stream, capturing bool, arr uintptr, c int) error {
	if !capturing && seedFlags() {
		return e.submit(s)
	}
	if e.caps.SplitWaitReset {
		if err := e.submit(s); err != nil {
			return err
		}
	}
	// Under rootRel the word is in c's array, on this device and in this
	// process, so a write-value in the batch of the wait resets it, with
	// copied flags too: no driver call or copy-engine op of its own. On one
	// H200 that cut a 4-rank eager 8 B AllGather from 184-209 to 157-172
	// us of host time and made graph replays 0-3 us slower (a copy ran
	// beside the next ops; the write holds the batch).
	e.ops = append(e.ops, writeOp(e.releaseWord(arr, c), 0))
	return e.submit(s)
}

// waitWords returns the words of the array at offset arr that this rank's
// waits may watch: as coordinator its arrival words (all pairs: every slot
// of mine), as a peer its release word of every coordinator it may have
// (rank 0, or every rank with rooted rounds). Abort writes releaseValue
// into exactly these (it allocates: Abort only).
func (e *Engine) waitWords(arr uintptr) []hip.DevicePtr {
	local := e.syncBase + hip.DevicePtr(arr)
	var out []hip.DevicePtr
	if !e.star {
		for r := range e.n {
			out = append(out, local+hip.DevicePtr(r*4))
		}
		return out
	}
	if e.rank == 0 || e.rooted {
		for k := range laneWords(e.n) {
			out = append(out, local+hip.DevicePtr(k*4))
		}
	}
	if !e.rootRel {
		if e.rank != 0 || e.rooted {
			out = append(out, local) // slot 0, my release word
		}
		return out
	}
	for c := range e.n {
		if c != e.rank && (c == 0 || e.rooted) {
			out = append(out, e.releaseWord(arr, c))
		}
	}
	return out
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
