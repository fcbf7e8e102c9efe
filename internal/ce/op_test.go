package ce

import (
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// The table's answers for every operation and form, as NCCL's contract
// states them (nccl.h; the in-place rooted layout of the protocol): the
// buffers each rank uses, the in-place forms, the deciding buffer and the
// symmetric pointer.
func TestOpTable(t *testing.T) {
	const n, chunk = 4, 0x100
	const buf = hip.DevicePtr(0x10000) // the in-place layouts' buffer
	other := hip.DevicePtr(0x80000)
	type want struct {
		uses      [2]bool // send, recv
		inPlace   bool
		deciding  hip.DevicePtr
		decSize   uintptr
		sym       hip.DevicePtr
		symSize   uintptr
		layout    bool
		formShare bool
	}
	for _, tc := range []struct {
		name       string
		fn         Func
		rank, root int
		send, recv hip.DevicePtr
		want       want
	}{
		{"allgather", FuncAllGather, 1, 0, other, buf, want{[2]bool{true, true}, false, buf, n * chunk, buf, n * chunk, false, false}},
		{"allgather in place", FuncAllGather, 1, 0, buf + chunk, buf, want{[2]bool{true, true}, true, buf, n * chunk, buf, n * chunk, false, false}},
		{"alltoall", FuncAlltoAll, 2, 0, other, buf, want{[2]bool{true, true}, false, buf, n * chunk, buf, n * chunk, false, true}},
		{"alltoall in place", FuncAlltoAll, 2, 0, buf, buf, want{[2]bool{true, true}, true, buf, n * chunk, buf, n * chunk, false, true}},
		{"scatter root", FuncScatter, 1, 1, other, buf, want{[2]bool{true, true}, false, buf, chunk, buf, chunk, false, true}},
		{"scatter root in place", FuncScatter, 1, 1, buf, buf + chunk, want{[2]bool{true, true}, true, buf + chunk, chunk, buf, n * chunk, true, true}},
		{"scatter peer", FuncScatter, 2, 1, 0, buf + 2*chunk, want{[2]bool{false, true}, false, buf + 2*chunk, chunk, buf + 2*chunk, chunk, false, false}},
		{"scatter peer, send anything", FuncScatter, 2, 1, buf, buf + 2*chunk, want{[2]bool{false, true}, false, buf + 2*chunk, chunk, buf + 2*chunk, chunk, false, false}},
		{"gather root", FuncGather, 3, 3, other, buf, want{[2]bool{true, true}, false, other, chunk, other, chunk, false, true}},
		{"gather root in place", FuncGather, 3, 3, buf + 3*chunk, buf, want{[2]bool{true, true}, true, buf + 3*chunk, chunk, buf, n * chunk, true, true}},
		{"gather peer", FuncGather, 0, 3, buf, 0, want{[2]bool{true, false}, false, buf, chunk, buf, chunk, false, false}},
		{"broadcast root", FuncBroadcast, 0, 0, other, buf, want{[2]bool{true, true}, false, buf, chunk, buf, chunk, false, false}},
		{"broadcast root in place", FuncBroadcast, 0, 0, buf, buf, want{[2]bool{true, true}, true, buf, chunk, buf, chunk, false, false}},
		{"broadcast peer", FuncBroadcast, 1, 0, 0, buf, want{[2]bool{false, true}, false, buf, chunk, buf, chunk, false, false}},
		{"send", FuncSend, 0, 1, buf, 0, want{[2]bool{true, false}, false, 0, 0, 0, 0, false, false}},
		{"recv", FuncRecv, 1, 0, 0, buf, want{[2]bool{false, true}, false, 0, 0, 0, 0, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := OpOf(tc.fn)
			a := &Args{Func: tc.fn, Root: tc.root, Count: chunk / 4, EltSize: 4, Send: tc.send, Recv: tc.recv}
			got := want{uses: [2]bool{o.Uses(SideSend, tc.rank, tc.root), o.Uses(SideRecv, tc.rank, tc.root)},
				inPlace: o.InPlace(a, tc.rank), formShare: o.FormShared(tc.rank, tc.root)}
			got.deciding, got.decSize = o.Deciding(a, n)
			got.sym, got.symSize, got.layout = o.Symmetric(a, tc.rank, n)
			require.Equal(t, tc.want, got)
		})
	}
	require.Equal(t, "Broadcast, AllGather, Send, Recv, AlltoAll, Scatter and Gather", Provided())
	require.Nil(t, OpOf(NumFuncs))
	require.Nil(t, OpOf(-1))
	for f := range NumFuncs {
		require.NotEmpty(t, OpOf(f).Name, "ncclFunc_t %d has no row", f)
	}
}
