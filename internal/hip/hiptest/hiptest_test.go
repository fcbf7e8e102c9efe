package hiptest

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The wait table must mean what it says under CUDA's definition: the
// initial value never satisfies the wait, the written one does exactly
// when the row says so, and the operand itself always does.
func TestWaitCasesConsistent(t *testing.T) {
	for _, c := range waitCases {
		t.Run(c.name, func(t *testing.T) {
			require.False(t, waitHolds(c.cond, c.init, c.value), "initial value satisfies the wait")
			require.Equal(t, c.holds, waitHolds(c.cond, c.write, c.value), "written value")
			require.True(t, waitHolds(c.cond, c.value, c.value), "operand")
		})
	}
	// The rows that tell a cyclic GEQ from an unsigned one.
	require.True(t, waitHolds(0, 1, 0xfffffffe))
	require.False(t, waitHolds(0, 0x80000005, 5))
}

// Destinations never overlap and keep at least guard poisoned bytes
// around each; every size of copySizes appears; offsets stay in bounds.
func TestBatchLayout(t *testing.T) {
	for _, count := range []int{1, 13, 40, 100} {
		specs, srcLen, dstLen := batchLayout(rand.New(rand.NewPCG(1, uint64(count))), count)
		require.Len(t, specs, count)
		seen := map[uintptr]bool{}
		var prevEnd uintptr
		for i, c := range specs {
			seen[c.size] = true
			require.GreaterOrEqual(t, c.dst, prevEnd+guard, "copy %d guard before", i)
			require.LessOrEqual(t, c.src+c.size, srcLen)
			prevEnd = c.dst + c.size
		}
		require.LessOrEqual(t, prevEnd+guard, dstLen)
		if count >= len(copySizes) {
			for _, s := range copySizes {
				require.True(t, seen[s], "size %d missing", s)
			}
		}
		src := make([]byte, srcLen)
		for i := range src {
			src[i] = byte(i % 251)
		}
		img := batchImage(specs, src, dstLen)
		for i := range guard {
			require.Equal(t, byte(poison), img[i])
			require.Equal(t, byte(poison), img[len(img)-1-i])
		}
	}
}

func TestRandomLength(t *testing.T) {
	e := &env{rng: rand.New(rand.NewPCG(1, 2))}
	for _, n := range []uintptr{0, 1, 7, 8, 9, 4097} {
		b := e.random(n)
		require.Len(t, b, int(n))
		require.Equal(t, int(n), cap(b))
	}
}
