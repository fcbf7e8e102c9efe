package hiptest

import (
	"fmt"
	"math/rand/v2"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// poison fills destination buffers before a copy, so that a byte the copy
// should not touch, or did not write, shows.
const poison = 0xcd

// guard is the number of poisoned bytes kept on each side of a destination.
const guard = 61

// copySizes must all appear in a batch: 1 byte, odd sizes, page edges.
var copySizes = []uintptr{1, 2, 3, 7, 8, 31, 64, 127, 4095, 4096, 4097, 65537, 1<<20 + 3}

// copySpec is one copy of a batch, as offsets into the source and the
// destination buffers.
type copySpec struct{ src, dst, size uintptr }

// batchLayout places count copies: every size of copySizes once, the rest
// drawn from the small ones, at odd offsets, with at least guard poisoned
// bytes before, between and after the destinations. It returns the specs
// and the lengths the two buffers need.
func batchLayout(rng *rand.Rand, count int) (specs []copySpec, srcLen, dstLen uintptr) {
	var so, do uintptr
	for i := range count {
		size := copySizes[i%len(copySizes)]
		if i >= len(copySizes) {
			size = copySizes[rng.IntN(len(copySizes)-2)] // not the two largest
		}
		so += uintptr(rng.IntN(8))
		do += guard + uintptr(rng.IntN(8))
		specs = append(specs, copySpec{src: so, dst: do, size: size})
		so += size
		do += size
	}
	return specs, so, do + guard
}

// batchImage is the destination buffer expected after the copies.
func batchImage(specs []copySpec, src []byte, dstLen uintptr) []byte {
	img := filled(dstLen, poison)
	for _, c := range specs {
		copy(img[c.dst:c.dst+c.size], src[c.src:c.src+c.size])
	}
	return img
}

// requireImage compares a destination buffer with its expected image and
// names the copy or the guard bytes at the first difference.
func requireImage(e *env, specs []copySpec, want, got []byte, what string) {
	e.t.Helper()
	i := firstDiff(want, got)
	if i < 0 {
		return
	}
	where := "a guard byte (written by no copy)"
	for k, c := range specs {
		if uintptr(i) >= c.dst && uintptr(i) < c.dst+c.size {
			where = fmt.Sprintf("copy %d (%d bytes, byte %d of it)", k, c.size, uintptr(i)-c.dst)
		}
	}
	e.t.Fatalf("%s: destination byte %d, in %s, is %#02x, want %#02x (%d bytes differ)",
		what, i, where, got[i], want[i], countDiff(want, got))
}

// batchCase is one batched-copy variant.
type batchCase struct {
	name     string
	count    int
	attrs    []hip.CopyAttributes
	attrIdxs func(count int) []uintptr
	gated    bool // the batch sits behind a blocked wait on its stream
}

var (
	attrStream = hip.CopyAttributes{SrcAccessOrder: hip.SrcAccessOrderStream, Flags: hip.CopyFlagPreferOverlapWithCompute}
	attrAny    = hip.CopyAttributes{SrcAccessOrder: hip.SrcAccessOrderAny}
)

var batchCases = []batchCase{
	{name: "no-attrs", count: 40},
	{name: "one-copy", count: 1},
	{name: "behind-wait", count: 24, gated: true},
	{name: "one-attr", count: 40, attrs: []hip.CopyAttributes{attrStream},
		attrIdxs: func(int) []uintptr { return []uintptr{0} }},
	{name: "three-attrs", count: 40, attrs: []hip.CopyAttributes{attrStream, attrAny, attrStream},
		attrIdxs: func(n int) []uintptr { return []uintptr{0, uintptr(n / 3), uintptr(2 * n / 3)} }},
	{name: "attr-one-byte", count: 1, attrs: []hip.CopyAttributes{attrAny},
		attrIdxs: func(int) []uintptr { return []uintptr{0} }},
}

// testBatchCopy: MemcpyBatchAsync on random data into poisoned buffers;
// every byte of each destination is checked, and so is every guard byte
// around it. Where the backend has no batched copy, it must say so.
func testBatchCopy(e *env) {
	caps := e.rt.Caps()
	if !caps.BatchCopy {
		p := e.alloc(4096)
		s := e.stream()
		err := e.rt.MemcpyBatchAsync([]hip.DevicePtr{p + 2048}, []hip.DevicePtr{p}, []uintptr{16}, nil, nil, s)
		require.ErrorIs(e.t, err, hip.ErrNotSupported, "MemcpyBatchAsync where Caps().BatchCopy is false")
		return
	}
	for _, bc := range batchCases {
		e.sub(bc.name, func(e *env) {
			if len(bc.attrs) > 0 && !caps.CopyAttributes {
				e.t.Skip("Caps().CopyAttributes is false")
			}
			specs, srcLen, dstLen := batchLayout(e.rng, bc.count)
			src, dst := e.alloc(srcLen), e.alloc(dstLen)
			data := e.random(srcLen)
			e.write(src, data)
			require.NoError(e.t, e.rt.Memset(dst, poison, dstLen))
			flags := e.zeroed(4096)
			e.releaser()
			s := e.stream()

			dsts := make([]hip.DevicePtr, len(specs))
			srcs := make([]hip.DevicePtr, len(specs))
			sizes := make([]uintptr, len(specs))
			for i, c := range specs {
				dsts[i], srcs[i], sizes[i] = dst+hip.DevicePtr(c.dst), src+hip.DevicePtr(c.src), c.size
			}
			var idxs []uintptr
			if bc.attrIdxs != nil {
				idxs = bc.attrIdxs(len(specs))
			}
			if bc.gated {
				e.memops(s, hip.WaitValue32(word(flags, 0), 1, hip.WaitEQ))
			}
			require.NoError(e.t, e.rt.MemcpyBatchAsync(dsts, srcs, sizes, bc.attrs, idxs, s), "MemcpyBatchAsync")
			// Work after the batch on the same stream sees all of it.
			last := specs[len(specs)-1]
			e.copyAsync(word(flags, 1), dst+hip.DevicePtr(last.dst), 1, s)
			e.memops(s, hip.WriteValue32(word(flags, 2), 1))
			if bc.gated {
				e.blocked(s, "batched copy behind a wait")
				requireBytes(e.t, filled(dstLen, poison), e.read(dst, dstLen), "destination while the batch is held by a wait")
				e.releaseWith(word(flags, 0), 1)
			}
			e.sync(s, "batched copy")
			requireImage(e, specs, batchImage(specs, data, dstLen), e.read(dst, dstLen), bc.name)
			require.Equal(e.t, data[last.src], e.read(word(flags, 1), 1)[0], "a copy after the batch on its stream ran before the batch")
		})
	}
}
