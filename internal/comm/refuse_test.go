package comm

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// A collective that one rank refuses while its peers issue theirs fails
// the communicator on every rank (Comm.Refuse): without that, the peers'
// parts wait for the refusing rank's next call and pair with it, and both
// complete with the other call's data, or wait for CECOLL_TIMEOUT. Each
// case has rank 0 or 1 refuse at another point of the call's path: the
// argument check, the engine's plan (after the call took its place in the
// stream order, claimStream) and a group whose first set ran.
func TestRefusalFailsEveryRank(t *testing.T) {
	const count = 64 // int32 elements per block
	const chunk = count * 4
	type bufs struct {
		s          hip.Stream
		win        hip.DevicePtr // a symmetric window of 4 chunks
		send, recv hip.DevicePtr // unregistered, 2 chunks each
	}
	// An in-place Scatter whose root's send buffer (n chunks) reaches out
	// of its window, while its recv buffer (its block) lies inside: the
	// engine refuses it in route (inWindow), after the call took its
	// place in the stream order.
	badScatter := func(c *Comm, b *bufs, root int) error {
		send := b.win
		recv := b.win + hip.DevicePtr(c.rank*chunk)
		if c.rank == root {
			send = b.win - chunk // root 1: a chunk before the window
			if root == 0 {
				send = b.win + 3*chunk // root 0: past its end
			}
			recv = send + hip.DevicePtr(root*chunk)
		}
		return c.Collective(FuncScatter, send, recv, count, 2, root, b.s)
	}
	cases := []struct {
		name    string
		refuser int
		// call is rank c's first call; the refuser's must fail with want.
		call func(c *Comm, b *bufs) error
		want result.Code
	}{
		{"NULL recvbuff", 0, func(c *Comm, b *bufs) error {
			recv := b.recv
			if c.rank == 0 {
				recv = 0
			}
			return c.Collective(FuncAllGather, b.send, recv, count, 2, 0, b.s)
		}, result.InvalidArgument},
		{"engine refusal", 1, func(c *Comm, b *bufs) error { return badScatter(c, b, 1) }, result.InvalidArgument},
		{"group partly issued", 0, func(c *Comm, b *bufs) error {
			if err := GroupStart(); err != nil {
				return err
			}
			err := c.Collective(FuncAllGather, b.send, b.recv, count, 2, 0, b.s)
			if err == nil {
				err = badScatter(c, b, 0)
			}
			return firstNonNil(GroupEnd(), err)
		}, result.InvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			watchdog(t, 60*time.Second)
			rt := newRT(t, 2)
			comms, errs := initThreads(t, rt, []int{0, 1})
			require.NoError(t, firstError(errs))
			bs := make([]*bufs, 2)
			errs = onRanks(comms, func(c *Comm) error {
				if err := rt.SetDevice(c.Device()); err != nil {
					return err
				}
				b := &bufs{}
				var err error
				if b.s, err = rt.StreamCreate(); err != nil {
					return err
				}
				if b.win, err = MemAlloc(rt, 4*chunk+WindowAlign); err != nil {
					return err
				}
				b.win += WindowAlign // a chunk before the window is mapped memory
				if _, err = c.WindowRegister(b.win, 4*chunk, WinCollSymmetric); err != nil {
					return err
				}
				if b.send, err = MemAlloc(rt, 2*chunk); err != nil {
					return err
				}
				b.recv, err = MemAlloc(rt, 2*chunk)
				bs[c.rank] = b
				return err
			})
			require.NoError(t, firstError(errs))

			errs = onRanks(comms, func(c *Comm) error {
				if err := rt.SetDevice(c.Device()); err != nil {
					return err
				}
				return tc.call(c, bs[c.rank])
			})
			requireCode(t, tc.want, errs[tc.refuser])
			// Every peer learns it at once, and its stream runs to the
			// end (its waits are released), long before CECOLL_TIMEOUT.
			for _, c := range comms {
				deadline := time.Now().Add(10 * time.Second)
				for c.AsyncError() == nil && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				require.Error(t, c.AsyncError(), "rank %d has no asynchronous error", c.rank)
				runtime.LockOSThread()
				require.NoError(t, rt.SetDevice(c.Device()))
				require.NoError(t, rt.StreamSynchronize(bs[c.rank].s))
				runtime.UnlockOSThread()
			}
			// No later call pairs with another: every rank refuses it.
			errs = onRanks(comms, func(c *Comm) error {
				if err := rt.SetDevice(c.Device()); err != nil {
					return err
				}
				b := bs[c.rank]
				return c.Collective(FuncAllGather, b.send, b.recv, count, 2, 0, b.s)
			})
			for r, err := range errs {
				require.Error(t, err, "rank %d's call after the refusal succeeded", r)
				require.Contains(t, err.Error(), "refused a call", "rank %d", r)
			}
			for _, c := range comms {
				require.NoError(t, c.Destroy())
			}
		})
	}
}

// On one rank a refusal misleads no peer: the communicator stays usable.
func TestRefusalOneRank(t *testing.T) {
	watchdog(t, 30*time.Second)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rt := newRT(t, 1)
	comms, err := InitAll(rt, 1, nil, DefaultConfig())
	require.NoError(t, err)
	c := comms[0]
	s, err := rt.StreamCreate()
	require.NoError(t, err)
	buf, err := MemAlloc(rt, 4096)
	require.NoError(t, err)
	requireCode(t, result.InvalidArgument, c.Collective(FuncAllGather, buf, 0, 4, 2, 0, s))
	require.NoError(t, c.Collective(FuncAllGather, buf, buf+1024, 4, 2, 0, s))
	require.NoError(t, rt.StreamSynchronize(s))
	require.NoError(t, c.AsyncError())
	require.NoError(t, c.Destroy())
}

// Refusals every rank makes alike leave the communicator usable: copy
// engines never reduce, whatever the rank.
func TestRefusalAlikeStaysPlain(t *testing.T) {
	watchdog(t, 30*time.Second)
	rt := newRT(t, 2)
	comms, err := InitAll(rt, 2, nil, DefaultConfig())
	require.NoError(t, err)
	defer destroyAll(t, comms)
	for _, c := range comms {
		requireCode(t, result.InvalidUsage, c.Launch(&LaunchArgs{Func: ce.FuncAllReduce, Datatype: 2, Count: 4, EltSize: 4, Send: 1, Recv: 1}, nil, nil))
		require.NoError(t, c.AsyncError())
	}
}

// Two ranks of one process, a thread each, issue AllGathers on the NULL
// stream outside a group: on one device they share that stream, and each
// could wait for the other queued behind it (refused, the communicator
// fails); on two devices each has its own NULL stream, and the calls run.
func TestNullStreamPerDevice(t *testing.T) {
	const count = 64
	for _, devs := range [][]int{{0, 1}, {0, 0}} {
		t.Run(fmt.Sprintf("devices=%v", devs), func(t *testing.T) {
			watchdog(t, 60*time.Second)
			rt := newRT(t, 2)
			comms, errs := initThreads(t, rt, devs)
			require.NoError(t, firstError(errs))
			sends, recvs := make([]hip.DevicePtr, 2), make([]hip.DevicePtr, 2)
			// Filled first, on both ranks: a synchronous copy waits for
			// the device's NULL stream, where a peer's call may wait.
			require.NoError(t, firstError(onRanks(comms, func(c *Comm) error {
				if err := rt.SetDevice(c.Device()); err != nil {
					return err
				}
				var err error
				if sends[c.rank], err = MemAlloc(rt, count); err != nil {
					return err
				}
				if recvs[c.rank], err = MemAlloc(rt, 2*count); err != nil {
					return err
				}
				return hip.CopyToDevice(rt, sends[c.rank], bytes.Repeat([]byte{byte(c.rank + 1)}, count))
			})))
			errs = onRanks(comms, func(c *Comm) error {
				if err := rt.SetDevice(c.Device()); err != nil {
					return err
				}
				if err := c.Collective(FuncAllGather, sends[c.rank], recvs[c.rank], count, 0, 0, hip.StreamNull); err != nil {
					return err
				}
				return rt.StreamSynchronize(hip.StreamNull)
			})
			if devs[0] == devs[1] {
				require.Error(t, firstError(errs))
				require.Contains(t, firstError(errs).Error(), "the NULL stream")
			} else {
				require.NoError(t, firstError(errs))
				for r := range 2 {
					got := make([]byte, 2*count)
					runtime.LockOSThread()
					require.NoError(t, rt.SetDevice(devs[r]))
					require.NoError(t, hip.CopyFromDevice(rt, got, recvs[r]))
					runtime.UnlockOSThread()
					require.Equal(t, append(bytes.Repeat([]byte{1}, count), bytes.Repeat([]byte{2}, count)...), got, "rank %d", r)
				}
			}
			for _, c := range comms {
				require.NoError(t, c.Destroy())
			}
		})
	}
}
