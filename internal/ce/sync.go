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
// Values lie in [1, 2^31): 0 never satisfies GEQ v, v does. Without the
// eager resets GEQ would not be EQ: a graph's GEQ 1 would pass on the value
// a previous eager call left (B10), and a zeroed slot satisfies GEQ v for
// v >= 2^31.

// seqLimit bounds eager values to [2, 2^31) (see above); the counter goes
// from seqLimit-1 back to 2, skipping 0 (the reset value) and 1 (the graph
// constant) (B10, B18).
const seqLimit = 1 << 31

// releaseValue satisfies every wait the engine queues: GEQ v for every v in
// [1, 2^31). Abort writes it into every local slot.
const releaseValue = seqLimit - 1

// seedFlags restores the seed's flag protocol (EQ waits, eager syncs
// leave their values in the arrays) for the regression tests whose defect
// only shows with it: under GEQ with resets a stale or overwritten value no
// longer hangs or releases a wait (B4, B10, B19).
func seedFlags() bool { return seed.b4 || seed.b10 || seed.b19 }

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
// the next sequence number, or under capture the constant 1 (a graph is
// replayed many times). Every wait is followed by a reset of the slot to 0
// (see the GEQ note above). Syncs alternate between the ready and the
// complete array, so a fast peer never overwrites a slot its partner has
// not yet seen. Two algorithms (Config.Sync), both with those rules:
//
//   - all pairs (the seed's): I write my slot in every peer's array (or
//     once to the multicast address of my slot) and wait for every peer's
//     slot in mine;
//   - star: a rank other than 0 writes its slot in rank 0's array and
//     waits for rank 0's slot in its own; rank 0 waits for every peer's
//     slot in its array, resets them, and only then writes its slot in
//     every peer's array. The alternation argument holds hop by hop: a
//     peer writes rank 0's array again two syncs later, after rank 0's
//     release of the sync in between, which rank 0's stream issues after
//     its reset; rank 0 writes a peer's array again after that peer's next
//     arrival, which the peer's stream issues after its reset.
func (e *Engine) sync(s hip.Stream, capturing bool) error {
	if e.n == 1 {
		return nil
	}
	arr, word := uintptr(0), hip.DevicePtr(wordReady)
	if e.useCompl {
		arr, word = e.complOff, wordCompl
	}
	e.useCompl = !e.useCompl
	val := uint32(graphSyncValue)
	if !capturing {
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
		if err := e.announce(s, capturing, arr, e.rank, -1, word, val); err != nil {
			return err
		}
		return e.await(s, capturing, local, -1, val)
	}
	if e.rank != 0 { // star
		if err := e.announce(s, capturing, arr, e.rank, 0, word, val); err != nil {
			return err
		}
		return e.await(s, capturing, local, 0, val)
	}
	// Rank 0: gather every arrival, then release everyone.
	if err := e.await(s, capturing, local, -1, val); err != nil {
		return err
	}
	if err := e.announce(s, capturing, arr, 0, -1, word, val); err != nil {
		return err
	}
	return e.submit(s)
}

// announce writes val into slot of array arr (ready or complete) of rank
// to, or of every peer when to < 0 (one write to the multicast address
// where there is one). By write-value, or by 4-byte copies from a device
// word (e.flagCopy): eagerly the word is first set by a local write-value
// (B4, B5); under capture the source is the graph constant. Ops queued in
// e.ops before the call are submitted first, in order.
func (e *Engine) announce(s hip.Stream, capturing bool, arr uintptr, slot, to int, word hip.DevicePtr, val uint32) error {
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
	if !capturing {
		src = e.words + word
		if seed.b4 && e.mc != 0 {
			// The seed copied the value from the host (a stack variable);
			// the copy may run after the value changed.
			e.hostSeq = val
			src = hip.DevicePtr(unsafe.Pointer(&e.hostSeq))
		} else {
			// A local write-value publishes the value in a device word,
			// then copies carry it to the peers (B4, B5).
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

// await queues waits for slot from of my array at local (every peer's
// slot when from < 0), then the reset of each waited slot to 0, and
// submits everything queued.
func (e *Engine) await(s hip.Stream, capturing bool, local hip.DevicePtr, from int, val uint32) error {
	for r := range e.n {
		if r != e.rank && (from < 0 || r == from) {
			e.ops = append(e.ops, waitOp(local+hip.DevicePtr(r*4), val))
		}
	}
	if capturing || !seedFlags() {
		if e.caps.SplitWaitReset {
			// HIP may let later writes of a batch overtake its waits.
			if err := e.submit(s); err != nil {
				return err
			}
		}
		for r := range e.n {
			if r != e.rank && (from < 0 || r == from) {
				e.ops = append(e.ops, writeOp(local+hip.DevicePtr(r*4), 0))
			}
		}
	}
	return e.submit(s)
}
