package ce

// seed restores, per defect, the behaviour of the seed file
// (shared/seed/ce_coll.cc.txt). Every field is false in the product; the
// regression tests switch one on to show that the defect then appears, so
// each test proves something. Defects without a field do not apply (see
// the comments in seed_test.go).
var seed struct {
	b1  bool // memop entries without their operation type
	b2  bool // eager batched copies compiled out
	b3  bool // copy attributes passed where the batched copy refuses them
	b4  bool // multicast flag copied from host memory
	b5  bool // write-value to peer memory even where it is refused
	b6  bool // multicast set up lazily at the first sync, without a barrier, also for 2 ranks
	b7  bool // memop lists submitted whole, even above 255 entries
	b8  bool // odd number of syncs kept inside a captured collective
	b9  bool // intra-batch sync decided from the local copy count
	b10 bool // eager sequence starts at 1, the graph constant
	b11 bool // a rank decides alone to leave the CE path (NULL non-root buffer)
	b12 bool // in-place Scatter writes to recv + dst*chunk on every peer
	b13 bool // in-place AlltoAll pushes straight from the buffer peers write into
	b14 bool // batched copies on the legacy NULL stream
	b15 bool // CE state set up lazily, at the first collective
	b16 bool // parameter arrays allocated on every call
	b17 bool // sync arrays not zeroed at init
	b18 bool // sequence wraps onto 0 and 1
	b19 bool // collectives of one communicator not ordered across streams
}
