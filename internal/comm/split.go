package comm

import (
	"encoding/binary"
	"hash/fnv"
	"slices"

	"cecoll/internal/bootstrap"
	"cecoll/internal/forward"
	"cecoll/internal/result"
)

// SplitNoColor is NCCL_SPLIT_NOCOLOR.
const SplitNoColor = -1

// Split is ncclCommSplit: collective over c's ranks, outside a group. The
// ranks of one color form a new communicator, ordered by key then by
// their rank in c; NCCL_SPLIT_NOCOLOR gives none (nil). cfg is the
// caller's config (nil: c's). In forward mode the real communicator is
// split first, with the caller's config unchanged, and each new
// communicator pairs with its part (or stays CE-only, agreed, where the
// real library refused).
//
// The new communicator's bootstrap: the first rank of each color makes a
// unique id (its process's root) and passes it over c's bootstrap; the
// members then create their ranks with it, on c's device.
func (c *Comm) Split(color, key int, cfg *Config) (*Comm, error) {
	if currentGroup() != nil {
		return nil, result.Errorf(result.InvalidUsage, "ncclCommSplit: inside ncclGroupStart/End is not supported by cecoll; split outside the group (one thread or process per rank)")
	}
	if color < 0 && color != SplitNoColor {
		return nil, result.Errorf(result.InvalidArgument, "ncclCommSplit: color %d (want >= 0 or NCCL_SPLIT_NOCOLOR)", color)
	}
	if err := c.usable("ncclCommSplit"); err != nil {
		return nil, err
	}
	child := c.cfg
	var raw []byte
	if cfg != nil {
		child, raw = *cfg, cfg.Raw
	}
	var real forward.Handle
	var realErr error
	if h := c.Real(); h != 0 {
		real, realErr = c.lib.Split(forward.Handle(h), color, key, raw)
	}
	n, rank, leader, err := c.splitMembers(color, key)
	if err != nil || n == 0 {
		c.dropReal(real)
		return nil, err
	}
	id, err := c.newMembersID(rank == 0, leader)
	if err != nil {
		c.dropReal(real)
		return nil, err
	}
	// A CE-only parent (agreed on every rank) gives CE-only children, for
	// the same reason.
	p := pairArgs{}
	if c.Real() != 0 {
		p = pairArgs{lib: c.lib, mode: pairGiven, given: real, givenErr: realErr}
	}
	var out *Comm
	err = c.onDevice(func() error {
		var err error
		out, err = initRank(c.rt, id, n, rank, c.dev, child, p)
		return err
	})
	if err == nil && out.lib == nil && c.lib != nil {
		out.lib, out.realWhy = c.lib, c.realWhy // refusals name the parent's reason
	}
	return out, err
}

// splitMembers exchanges (color, key) over c's bootstrap and returns the
// size of this rank's new communicator (0: NCCL_SPLIT_NOCOLOR), its rank
// there, and the rank of c that is the new rank 0.
func (c *Comm) splitMembers(color, key int) (n, rank, leader int, err error) {
	var b [8]byte
	binary.LittleEndian.PutUint32(b[0:], uint32(int32(color)))
	binary.LittleEndian.PutUint32(b[4:], uint32(int32(key)))
	all, err := c.boot.AllGather(b[:])
	if err != nil {
		return 0, 0, 0, err
	}
	type member struct{ key, rank int }
	var ms []member
	for r, p := range all {
		if len(p) != 8 {
			return 0, 0, 0, result.Errorf(result.InternalError, "ncclCommSplit: rank %d sent %d bytes", r, len(p))
		}
		if int(int32(binary.LittleEndian.Uint32(p[0:]))) == color && color != SplitNoColor {
			ms = append(ms, member{int(int32(binary.LittleEndian.Uint32(p[4:]))), r})
		}
	}
	slices.SortStableFunc(ms, func(x, y member) int {
		if x.key != y.key {
			return x.key - y.key
		}
		return x.rank - y.rank
	})
	// Every rank joins the id exchange, members or not.
	if len(ms) == 0 {
		_, err := c.boot.AllGather(nil)
		return 0, 0, 0, err
	}
	for i, m := range ms {
		if m.rank == c.rank {
			rank = i
		}
	}
	return len(ms), rank, ms[0].rank, nil
}

// newMembersID is the second exchange of Split: each new communicator's
// first rank (lead) makes its unique id, and every rank takes its leader's.
func (c *Comm) newMembersID(lead bool, leader int) (ID, error) {
	var mine []byte
	var idErr error
	if lead {
		// Its own root, as NCCL's split ignores NCCL_COMM_ID: the
		// members met already, over c.
		id, err := bootstrap.NewRandomID()
		if err != nil {
			idErr = err
			mine = []byte{0}
		} else {
			mine = id[:]
		}
	}
	all, err := c.boot.AllGather(mine)
	if err != nil {
		return ID{}, err
	}
	if idErr != nil {
		return ID{}, idErr
	}
	if len(all[leader]) != IDBytes {
		return ID{}, result.Errorf(result.RemoteError, "ncclCommSplit: rank %d could not make the new communicator's unique id", leader)
	}
	return ID(all[leader]), nil
}

// ShrinkAbort is NCCL_SHRINK_ABORT.
const ShrinkAbort = 0x01

// Shrink is ncclCommShrink: the ranks of c not in exclude (which do not
// call it) form a new communicator, in c's rank order. cfg is the
// caller's config (nil: c's). In forward mode the real communicator is
// shrunk first, with the caller's config and flags unchanged, and the new
// communicator pairs with its result. NCCL_SHRINK_ABORT aborts c's
// pending collectives on the copy engines first (c stays usable for
// destroy only, as in NCCL).
//
// The excluded ranks never call, so the members cannot meet over c's
// bootstrap: each makes the same unique id on its own, derived from c's
// and the excluded set (DerivedID), which c's root accepts.
func (c *Comm) Shrink(exclude []int32, cfg *Config, flags int) (*Comm, error) {
	if currentGroup() != nil {
		return nil, result.Errorf(result.InvalidUsage, "ncclCommShrink: inside ncclGroupStart/End is not supported by cecoll; shrink outside the group (one thread or process per rank)")
	}
	out := make([]bool, c.size)
	for _, r := range exclude {
		if r < 0 || int(r) >= c.size {
			return nil, result.Errorf(result.InvalidArgument, "ncclCommShrink: excluded rank %d out of range [0, %d)", r, c.size)
		}
		out[r] = true
	}
	if out[c.rank] {
		return nil, result.Errorf(result.InvalidArgument, "ncclCommShrink: rank %d is in its own excludeRanksList (excluded ranks do not call it)", c.rank)
	}
	if err := c.usable("ncclCommShrink"); err != nil && flags&ShrinkAbort == 0 {
		return nil, err // NCCL_SHRINK_ABORT is for a communicator that failed
	}
	n, rank := 0, 0
	h := fnv.New64a()
	for r, x := range out {
		if x {
			binary.Write(h, binary.LittleEndian, int32(r))
			continue
		}
		if r == c.rank {
			rank = n
		}
		n++
	}
	child := c.cfg
	var raw []byte
	if cfg != nil {
		child, raw = *cfg, cfg.Raw
	}
	p := pairArgs{}
	if rc := c.Real(); rc != 0 {
		real, err := c.lib.Shrink(forward.Handle(rc), exclude, raw, flags)
		p = pairArgs{lib: c.lib, mode: pairGiven, given: real, givenErr: err}
	}
	if flags&ShrinkAbort != 0 {
		if eng := c.engine(); eng != nil {
			eng.Abort()
		}
	}
	parent := c.selfID()
	id := bootstrap.DerivedID(&parent, h.Sum64()|1)
	var nc *Comm
	err := c.onDevice(func() error {
		var err error
		nc, err = initRank(c.rt, id, n, rank, c.dev, child, p)
		return err
	})
	if err == nil && nc.lib == nil && c.lib != nil {
		nc.lib, nc.realWhy = c.lib, c.realWhy
	}
	return nc, err
}

// selfID is the unique id c was made from, or an in-process one naming
// its rendezvous key (ncclCommInitAll, whose ranks share this process).
func (c *Comm) selfID() ID {
	if c.node != nil {
		return c.node.boot.ID()
	}
	return bootstrap.LocalID(c.w.key)
}
