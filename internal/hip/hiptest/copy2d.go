package hiptest

import (
	"fmt"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// shape2D is one 2D copy: height rows of width bytes, row i from
// src+i*spitch to dst+i*dpitch.
type shape2D struct{ width, height, spitch, dpitch uintptr }

// shapes2D include the engine's use (a column of 8-byte blocks out of a
// 4x32-byte matrix, into contiguous memory), single bytes, odd pitches and
// rows that cross pages.
var shapes2D = []shape2D{
	{8, 4, 32, 8},
	{1, 4, 4, 1},
	{1, 1, 1, 1},
	{100, 7, 101, 300},
	{4097, 3, 5000, 4097},
	{64, 33, 64, 64},
}

// image2D is the destination (guard bytes of poison around it) expected
// after a 2D copy of sh from src.
func image2D(sh shape2D, src []byte, dstLen uintptr) []byte {
	img := filled(dstLen, poison)
	for i := range sh.height {
		copy(img[guard+i*sh.dpitch:guard+i*sh.dpitch+sh.width], src[i*sh.spitch:i*sh.spitch+sh.width])
	}
	return img
}

// testCopy2D: Memcpy2DAsync on random data into poisoned buffers, eager
// (behind a copy on the same stream that writes its source, so stream
// order shows) and captured then replayed with new data; every byte of
// the destination and of its guards is checked. Width or height 0 is a
// no-op; a width above a pitch is refused.
func testCopy2D(e *env) {
	for _, sh := range shapes2D {
		e.sub(fmt.Sprintf("w%d-h%d-sp%d-dp%d", sh.width, sh.height, sh.spitch, sh.dpitch), func(e *env) {
			srcLen := (sh.height-1)*sh.spitch + sh.width
			dstLen := 2*guard + (sh.height-1)*sh.dpitch + sh.width
			stage, src, dst := e.alloc(srcLen), e.alloc(srcLen), e.alloc(dstLen)
			s := e.stream()

			data := e.random(srcLen)
			e.write(stage, data)
			require.NoError(e.t, e.rt.Memset(dst, poison, dstLen))
			e.copyAsync(src, stage, srcLen, s)
			require.NoError(e.t, e.rt.Memcpy2DAsync(dst+guard, sh.dpitch, src, sh.spitch, sh.width, sh.height, s), "Memcpy2DAsync")
			e.sync(s, "eager 2D copy")
			requireBytes(e.t, image2D(sh, data, dstLen), e.read(dst, dstLen), "eager 2D copy")

			require.NoError(e.t, e.rt.StreamBeginCapture(s, hip.CaptureModeThreadLocal))
			e.copyAsync(src, stage, srcLen, s)
			require.NoError(e.t, e.rt.Memcpy2DAsync(dst+guard, sh.dpitch, src, sh.spitch, sh.width, sh.height, s), "Memcpy2DAsync under capture")
			g, err := e.rt.StreamEndCapture(s)
			require.NoError(e.t, err, "StreamEndCapture")
			x, err := e.rt.GraphInstantiate(g)
			require.NoError(e.t, err, "GraphInstantiate")
			defer func() {
				require.NoError(e.t, e.rt.GraphExecDestroy(x))
				require.NoError(e.t, e.rt.GraphDestroy(g))
			}()
			for round := range 2 {
				data = e.random(srcLen)
				e.write(stage, data)
				require.NoError(e.t, e.rt.Memset(dst, poison, dstLen))
				require.NoError(e.t, e.rt.GraphLaunch(x, s), "GraphLaunch")
				e.sync(s, "replayed 2D copy")
				requireBytes(e.t, image2D(sh, data, dstLen), e.read(dst, dstLen), fmt.Sprintf("replay %d of a 2D copy", round))
			}
		})
	}
	e.sub("args", func(e *env) {
		p := e.alloc(4096)
		s := e.stream()
		require.NoError(e.t, e.rt.Memset(p, poison, 4096))
		require.NoError(e.t, e.rt.Memcpy2DAsync(p+2048, 8, p, 8, 0, 4, s), "width 0")
		require.NoError(e.t, e.rt.Memcpy2DAsync(p+2048, 8, p, 8, 8, 0, s), "height 0")
		require.ErrorIs(e.t, e.rt.Memcpy2DAsync(p+2048, 4, p, 8, 8, 2, s), hip.ErrInvalidValue, "width above the destination pitch")
		require.ErrorIs(e.t, e.rt.Memcpy2DAsync(p+2048, 8, p, 4, 8, 2, s), hip.ErrInvalidValue, "width above the source pitch")
		e.sync(s, "no-op 2D copies")
		requireBytes(e.t, filled(4096, poison), e.read(p, 4096), "no-op 2D copies")
	})
}
