package ce

import (
	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// A collective queues its copies slot by slot: slot j is the j-th peer of
// the rotation (slot 0 is the rank itself). A slot may hold no copy (an
// in-place local block) but still counts, so that sub-batch boundaries,
// computed from slot numbers, are the same on every rank (B9).

// resetCopies empties the copy list.
func (e *Engine) resetCopies() {
	e.dsts, e.srcs, e.sizes = e.dsts[:0], e.srcs[:0], e.sizes[:0]
	e.own.pending = false
}

// slot marks the start of slot j.
func (e *Engine) slot(j int) { e.bounds[j] = len(e.dsts) }

// sideCopyMin is the smallest local copy that goes to the side stream
// (Engine.side): below it the fork and join (four calls) cost more than the
// overlap gains. A variable so that tests can send every copy there.
var sideCopyMin uintptr = 1 << 20

// addLocal queues the rank's own block, n bytes src -> dst: on the side
// stream, forked from s now, when the engine has one and the copy is
// large; else as a copy of the current slot. The fork may happen anywhere
// in the call: the block is this rank's alone. join ends it.
func (e *Engine) addLocal(s hip.Stream, dst, src hip.DevicePtr, n uintptr) error {
	if e.side == 0 || n < sideCopyMin {
		e.add(dst, src, n)
		return nil
	}
	if err := e.rt.EventRecord(e.sideFork, s); err != nil {
		return err
	}
	if err := e.rt.StreamWaitEvent(e.side, e.sideFork); err != nil {
		return err
	}
	if err := e.rt.MemcpyAsync(dst, src, n, e.side); err != nil {
		return err
	}
	e.sidePending = true
	return nil
}

// ownCopy is a pending copy of the rank's own block.
type ownCopy struct {
	dst, src hip.DevicePtr
	n        uintptr
	pending  bool
}

// addOwn queues the rank's own block, n bytes src -> dst. A large block
// that does not go to the side stream (addLocal) is held back and copied
// on the collective's stream inside the round's first sync, at the point
// where the rank would otherwise wait (flushOwn): after its own arrival,
// before its waits for the peers, which the copy then overlaps instead of
// lengthening the batch after it. The block is this rank's alone: no peer
// reads or writes it, and its stream orders it after the rank's earlier
// work. A small block stays in the batch: a driver call of its own would
// cost more host time than the overlap saves (with it, a 4-rank 8 B
// AllGather took 1.28x the host time of the same calls from C). Not in
// the seed's B9 mode, whose defect needs the local copy in the batch.
func (e *Engine) addOwn(s hip.Stream, dst, src hip.DevicePtr, n uintptr) error {
	if e.side != 0 || n < sideCopyMin || seed.b9 {
		return e.addLocal(s, dst, src, n)
	}
	e.own = ownCopy{dst, src, n, true}
	return nil
}

// flushOwn enqueues the held-back own block on s, after what e.ops holds.
func (e *Engine) flushOwn(s hip.Stream) error {
	if !e.own.pending {
		return nil
	}
	e.own.pending = false
	if err := e.submit(s); err != nil {
		return err
	}
	return e.rt.MemcpyAsync(e.own.dst, e.own.src, e.own.n, s)
}

// join makes s wait for the local copies forked to the side stream, so
// that the call ends after them (under capture this also ends the side
// stream's part of the capture).
func (e *Engine) join(s hip.Stream) error {
	if !e.sidePending {
		return nil
	}
	e.sidePending = false
	if err := e.rt.EventRecord(e.sideJoin, e.side); err != nil {
		return err
	}
	return e.rt.StreamWaitEvent(s, e.sideJoin)
}

// add queues one copy of n bytes.
func (e *Engine) add(dst, src hip.DevicePtr, n uintptr) {
	e.dsts = append(e.dsts, dst)
	e.srcs = append(e.srcs, src)
	e.sizes = append(e.sizes, n)
}

// subBatches is the number of sub-batches of a collective of nSlots slots
// that moves chunk bytes per slot: more than one only for AllGather and
// AlltoAll with more slots than the frequency and at least the threshold
// moved (chunk*n). It depends on n and chunk only, so every rank runs the
// same number of syncs (B9).
func (e *Engine) subBatches(nSlots int, chunk uintptr) int {
	f := e.cfg.IntraBatchSyncFreq
	if nSlots <= f || uint64(chunk)*uint64(nSlots) < e.cfg.IntraBatchSyncThreshold {
		return 1
	}
	return (nSlots + f - 1) / f
}

// launchRound runs one sync-copies-sync round of the queued copies, split
// into sub-batches as subBatches decides, with a sync between sub-batches.
// A round with an odd number of syncs gets one more, so that every
// collective starts on the ready array: under capture this keeps replays
// in phase (B8); eager calls keep it too, so that a graph captured between
// eager calls finds the arrays in the phase it was captured in.
func (e *Engine) launchRound(s hip.Stream, capturing bool, nSlots int, chunk uintptr, intra bool) error {
	e.bounds[nSlots] = len(e.dsts)
	k := 1
	if intra {
		k = e.subBatches(nSlots, chunk)
	}
	if seed.b9 && intra {
		return e.launchRoundSeedB9(s, capturing, chunk)
	}
	if e.evr.stepping {
		// EventRound took only calls of one sub-batch.
		if k > 1 {
			return result.Errorf(result.InternalError, "ce: event round of %d sub-batches", k)
		}
		if err := e.evWait(s); err != nil {
			return err
		}
		return e.copies(s, capturing, 0, len(e.dsts))
	}
	if err := e.sync(s, capturing); err != nil {
		return err
	}
	f := e.cfg.IntraBatchSyncFreq
	for b := range k {
		lo, hi := 0, len(e.dsts)
		if k > 1 {
			lo, hi = e.bounds[b*f], e.bounds[min((b+1)*f, nSlots)]
		}
		if err := e.copies(s, capturing, lo, hi); err != nil {
			return err
		}
		if b+1 < k {
			if err := e.sync(s, capturing); err != nil {
				return err
			}
		}
	}
	if (k-1)&1 == 1 && !(seed.b8 && capturing) {
		// Keep the sync count even (B8).
		if err := e.sync(s, capturing); err != nil {
			return err
		}
	}
	return e.sync(s, capturing)
}

// launchRoundSeedB9 is the seed's intra-batch rule: decided from the local
// copy count, which differs between in-place and out-of-place ranks.
func (e *Engine) launchRoundSeedB9(s hip.Stream, capturing bool, chunk uintptr) error {
	if err := e.sync(s, capturing); err != nil {
		return err
	}
	num, f := len(e.dsts), e.cfg.IntraBatchSyncFreq
	if num > f && uint64(chunk)*uint64(num) >= e.cfg.IntraBatchSyncThreshold {
		for i := 0; i < num; i += f {
			if err := e.copies(s, capturing, i, min(i+f, num)); err != nil {
				return err
			}
			if i+f < num {
				if err := e.sync(s, capturing); err != nil {
					return err
				}
			}
		}
	} else if err := e.copies(s, capturing, 0, num); err != nil {
		return err
	}
	return e.sync(s, capturing)
}

// copies enqueues queued copies [lo, hi) on s: one batched copy where the
// runtime has it, else (and under capture, and on the legacy NULL stream,
// B14) one copy per entry. A single copy goes alone too: a batch of one
// orders nothing, and on the lent H200 a batch call cost about twice a
// plain copy's host time (the design card: 9.3 us for 2 copies against
// 4.4 us for one cudaMemcpyAsync). A released round (releasedRound) has
// one copy per rank; with batches of one, its eager 8 B Scatter at 8 ranks
// took 128-130 us of host time against 93-108 for the root's one batch.
// The gain of this path was not measured on the GPU (fifth session).
func (e *Engine) copies(s hip.Stream, capturing bool, lo, hi int) error {
	if lo >= hi {
		return nil
	}
	single := hi-lo == 1 && !seed.b2 && !seed.b3
	perCopy := single || capturing || !e.caps.BatchCopy || (s.IsLegacyNull() && !seed.b14)
	if perCopy {
		for i := lo; i < hi; i++ {
			if err := e.rt.MemcpyAsync(e.dsts[i], e.srcs[i], e.sizes[i], s); err != nil {
				return err
			}
		}
		return nil
	}
	if seed.b2 {
		// The seed compiled the batched copy out: eager calls moved nothing.
		return nil
	}
	attrs, idxs := e.attrs[:0], e.attrIdxs[:0]
	if e.caps.CopyAttributes || seed.b3 {
		// One entry for every copy (B3: only where attributes are accepted).
		attrs, idxs = e.attrs[:], e.attrIdxs[:]
	}
	return e.rt.MemcpyBatchAsync(e.dsts[lo:hi], e.srcs[lo:hi], e.sizes[lo:hi], attrs, idxs, s)
}
