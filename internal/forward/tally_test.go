package forward

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// The summary counts each way by operation, bytes where cecoll decoded
// them (not for stubs), the copy engines' share of those bytes, and a hint
// when nothing reached the copy engines; empty operations are left out.
func TestSummary(t *testing.T) {
	name := func(fn int) string { return fmt.Sprintf("Op%d", fn) }
	p := Policy{Bytes: 64 << 20}
	var tl Tally
	for range 3 {
		tl.Add(2, 1<<30, true)
	}
	tl.Add(2, 1<<20, false)
	tl.Add(5, 3<<30, false)
	tl.Add(99, 1, true) // out of range: not counted
	got := Summary("comm 0x1 rank 0/2", &tl, name, []StubCalls{{"ncclAllReduce", 900}, {"ncclReduce", 0}}, p)
	require.Equal(t, "summary comm 0x1 rank 0/2: copy engines 3 calls, 3.0 GiB (50% of the bytes cecoll routed) [Op2 3, 3.0 GiB]; "+
		"real library 902 calls [Op2 1, 1.0 MiB; Op5 1, 3.0 GiB; ncclAllReduce 900]", got)

	var none Tally
	none.Add(1, 4096, false)
	got = Summary("r", &none, name, nil, p)
	require.Equal(t, "summary r: copy engines 0 calls, 0 B (0% of the bytes cecoll routed); real library 1 calls [Op1 1, 4.0 KiB]; "+
		"nothing reached the copy engines: a block reaches them from CECOLL_ROUTE_BYTES=67108864, in a symmetric window, or with CECOLL_ROUTE=ce or NCCL_CTA_POLICY=2", got)
	got = Summary("r", &none, name, nil, Policy{Route: RouteNCCL})
	require.Contains(t, got, "; nothing reached the copy engines: CECOLL_ROUTE=nccl")
	require.Equal(t, "summary r: copy engines 0 calls, 0 B; real library 0 calls", Summary("r", &Tally{}, name, nil, p))
}

func TestSize(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 29: "1.5 GiB", 1 << 50: "1.0 PiB"} {
		require.Equal(t, want, Size(n), "%d", n)
	}
}

// Adding allocates nothing: it is on every routed call's path.
func TestTallyAddAllocs(t *testing.T) {
	var tl Tally
	require.Zero(t, testing.AllocsPerRun(100, func() { tl.Add(3, 4096, true) }))
}
