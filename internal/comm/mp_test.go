package comm

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/bootstrap"
	"cecoll/internal/ce"
	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// Multi-process tests: the parent makes the unique id (its process runs
// the bootstrap root) and re-executes this test binary as children, each
// running TestMPChild in the role named by CECOLL_MP_ROLE with its ranks
// in CECOLL_MP_RANKS. Children print "MP <word>" lines the parent reads.

const (
	envRole  = "CECOLL_MP_ROLE"
	envID    = "CECOLL_MP_ID"
	envN     = "CECOLL_MP_N"
	envRanks = "CECOLL_MP_RANKS"
	envWant  = "CECOLL_MP_WANT"

	// commIDRole in envID: the child makes its id itself (NCCL_COMM_ID).
	commIDRole = "commid"
	// envDone: a file the child makes once done; envAwait: a file the
	// child waits for before it exits (its process hosts the root).
	envDone  = "CECOLL_MP_DONE"
	envAwait = "CECOLL_MP_AWAIT"
)

// child is one started child process.
type child struct {
	cmd   *exec.Cmd
	lines chan string
	out   strings.Builder
	mu    sync.Mutex
	done  chan error
}

func startChild(t testing.TB, id ID, n int, ranks string, role string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMPChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envRole+"="+role, envID+"="+hex.EncodeToString(id[:]),
		envN+"="+strconv.Itoa(n), envRanks+"="+ranks)
	cmd.Env = append(cmd.Env, env...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	c := &child{cmd: cmd, lines: make(chan string, 64), done: make(chan error, 1)}
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			l := sc.Text()
			c.mu.Lock()
			c.out.WriteString(l + "\n")
			c.mu.Unlock()
			if strings.HasPrefix(l, "MP ") {
				c.lines <- strings.TrimPrefix(l, "MP ")
			}
		}
		io.Copy(io.Discard, stdout)
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	})
	return c
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// initTime waits for the child's "init <duration>" line.
func (c *child) initTime(t testing.TB) time.Duration {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case l := <-c.lines:
			if v, ok := strings.CutPrefix(l, "init "); ok {
				d, err := time.ParseDuration(v)
				require.NoError(t, err)
				return d
			}
		case <-deadline:
			t.Fatalf("child never printed its init time; output:\n%s", c.output())
		}
	}
}

// wait returns the child's exit error, failing the test past d.
func (c *child) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-c.done:
		return err
	case <-time.After(d):
		c.cmd.Process.Kill()
		t.Fatalf("child %v still running after %v; output:\n%s", c.cmd.Env[len(c.cmd.Env)-1], d, c.output())
		return nil
	}
}

func (c *child) expectLine(t *testing.T, want string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case l := <-c.lines:
			if l == want {
				return
			}
		case <-deadline:
			t.Fatalf("child never printed %q; output:\n%s", want, c.output())
		}
	}
}

func requireChildOK(t *testing.T, cs []*child, d time.Duration) {
	t.Helper()
	errs := make([]error, len(cs))
	for i, c := range cs {
		errs[i] = c.wait(t, d)
	}
	for i := range cs {
		if testing.Verbose() {
			t.Logf("child %d output:\n%s", i, cs[i].output())
		}
		if errs[i] != nil {
			for j, o := range cs {
				t.Logf("child %d (%v) output:\n%s", j, errs[j], o.output())
			}
		}
		require.NoError(t, errs[i], "child %d", i)
	}
}

// shmFiles lists /dev/shm (empty when it does not exist), less the files
// other programs on the machine make and delete as they run: Python's
// multiprocessing semaphores (sem.mp-*) and torch's shared tensors
// (torch_*); a Python test running beside this one made such a file.
func shmFiles(t *testing.T) map[string]bool {
	ents, _ := os.ReadDir("/dev/shm")
	m := make(map[string]bool)
	for _, e := range ents {
		if n := e.Name(); !strings.HasPrefix(n, "sem.mp-") && !strings.HasPrefix(n, "torch_") {
			m[n] = true
		}
	}
	return m
}

// requireNoLeftovers checks that no new /dev/shm file exists and that no
// child process still owns a cecoll socket.
func requireNoLeftovers(t *testing.T, before map[string]bool, cs []*child) {
	t.Helper()
	for f := range shmFiles(t) {
		require.True(t, before[f], "new /dev/shm file %q left behind", f)
	}
	b, err := os.ReadFile("/proc/net/unix")
	require.NoError(t, err)
	for _, c := range cs {
		tag := fmt.Sprintf("@cecoll-%d-", c.cmd.Process.Pid)
		require.NotContains(t, string(b), tag, "a socket of exited child pid %d remains", c.cmd.Process.Pid)
	}
}

func TestMPCollectives(t *testing.T) {
	watchdog(t, 60*time.Second)
	before := shmFiles(t)
	cases := []struct {
		name  string
		procs []string // each child's ranks
		env   []string
	}{
		{"2procs", []string{"0", "1"}, nil},
		{"3procs", []string{"0", "1", "2"}, nil},
		{"4procs", []string{"0", "1", "2", "3"}, nil},
		{"3procs-4ranks-group", []string{"2", "0,1", "3"}, nil},
		{"3procs-chaos", []string{"0", "1", "2"}, []string{"CECOLL_HOST_CHAOS=7"}},
		{"3procs-4ranks-check", []string{"1,3", "0", "2"}, []string{"CECOLL_CHECK=1"}},
	}
	var all []*child
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := NewID()
			require.NoError(t, err)
			n := 0
			for _, p := range tc.procs {
				n += len(strings.Split(p, ","))
			}
			var cs []*child
			for _, p := range tc.procs {
				cs = append(cs, startChild(t, id, n, p, "colls", tc.env...))
			}
			requireChildOK(t, cs, 45*time.Second)
			all = append(all, cs...)
		})
	}
	requireNoLeftovers(t, before, all)
}

// Strangers on the root's port are dropped; the real ranks still form.
func TestMPStranger(t *testing.T) {
	watchdog(t, 30*time.Second)
	id, err := NewID()
	require.NoError(t, err)
	addr, ok := id.RootAddr()
	require.True(t, ok)
	// Garbage bytes, a hello with a wrong secret, a huge length.
	for _, junk := range [][]byte{
		[]byte("GET / HTTP/1.0\r\n\r\n"),
		func() []byte {
			var e bootstrap.Enc
			e.Raw([]byte("cecollID")) // the id's magic
			e.U64(12345)
			e.U32(2)
			e.U32(0)
			e.U32(1)
			e.Str("host")
			e.Str("@sock")
			b := make([]byte, 5+len(e.B))
			copy(b[5:], e.B)
			b[0] = byte(len(e.B))
			b[4] = 1 // a hello frame
			return b
		}(),
		{0xff, 0xff, 0xff, 0x7f, 1},
	} {
		conn, err := net.Dial("tcp", addr.String())
		require.NoError(t, err)
		conn.Write(junk)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		require.Error(t, err, "the root answered a stranger")
		conn.Close()
	}
	// A silent stranger stays connected while the ranks form.
	silent, err := net.Dial("tcp", addr.String())
	require.NoError(t, err)
	defer silent.Close()
	cs := []*child{startChild(t, id, 2, "0", "barrier"), startChild(t, id, 2, "1", "barrier")}
	requireChildOK(t, cs, 20*time.Second)
}

func TestMPInitErrors(t *testing.T) {
	watchdog(t, 40*time.Second)
	rt := newRT(t, 1)
	good, err := NewID()
	require.NoError(t, err)

	// Garbage ids, checked before any connection.
	var zero ID
	_, err = InitRank(rt, zero, 2, 0, DefaultConfig())
	requireCode(t, result.InvalidArgument, err)
	badFamily := good
	badFamily[16], badFamily[17] = 99, 0
	_, err = InitRank(rt, badFamily, 2, 0, DefaultConfig())
	requireCode(t, result.InvalidArgument, err)
	// A well-formed id whose root is gone: nothing listens on its port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := good // the root's address is 127.0.0.1 too: change its port (big-endian at 18)
	binary.BigEndian.PutUint16(dead[18:], uint16(ln.Addr().(*net.TCPAddr).Port))
	ln.Close()
	_, err = InitRank(rt, dead, 2, 0, DefaultConfig())
	requireCode(t, result.SystemError, err)

	t.Run("missing", func(t *testing.T) {
		t.Setenv("CECOLL_BOOTSTRAP_TIMEOUT", "1")
		id, err := NewID()
		require.NoError(t, err)
		c := startChild(t, id, 2, "0", "expect", envWant+"=6", "CECOLL_BOOTSTRAP_TIMEOUT=1")
		requireChildOK(t, []*child{c}, 20*time.Second)
		require.Contains(t, c.output(), "never arrived")
	})
	t.Run("duplicate", func(t *testing.T) {
		id, err := NewID()
		require.NoError(t, err)
		cs := []*child{
			startChild(t, id, 3, "0", "expect", envWant+"=5"),
			startChild(t, id, 3, "0", "expect", envWant+"=5"),
			startChild(t, id, 3, "1", "expect", envWant+"=5"),
		}
		requireChildOK(t, cs, 20*time.Second)
		require.Contains(t, cs[0].output()+cs[1].output(), "claimed twice")
	})
	t.Run("nranks", func(t *testing.T) {
		id, err := NewID()
		require.NoError(t, err)
		cs := []*child{
			startChild(t, id, 2, "0", "expect", envWant+"=4"),
			startChild(t, id, 3, "1", "expect", envWant+"=4"),
		}
		requireChildOK(t, cs, 20*time.Second)
	})
}

// Processes whose environments set an engine setting differently (the
// sub-batch frequency in one of four, the threshold alike in all, which
// made their first AllGather move wrong bytes) fail init on every rank,
// naming the variable.
func TestMPEngineSettings(t *testing.T) {
	watchdog(t, 40*time.Second)
	id, err := NewID()
	require.NoError(t, err)
	const n = 4
	var cs []*child
	for r := range n {
		env := []string{envWant + "=5", "CECOLL_INTRA_BATCH_SYNC_THRESHOLD=4096"}
		if r == 0 {
			env = append(env, "CECOLL_INTRA_BATCH_SYNC_FREQ=1")
		}
		cs = append(cs, startChild(t, id, n, strconv.Itoa(r), "expect", env...))
	}
	requireChildOK(t, cs, 30*time.Second)
	for r, c := range cs {
		require.Contains(t, c.output(), "ranks disagree on CECOLL_INTRA_BATCH_SYNC_FREQ: rank 0 has 1, rank 1 has 8", "rank %d", r)
	}
}

// A child killed while the others' collective (or a send to it, or a
// receive from it) waits for it: the survivors see ncclRemoteError at once
// and abort promptly.
func TestMPKilledPeer(t *testing.T) {
	for _, op := range []string{"", "-p2p", "-recv"} {
		t.Run("op"+op, func(t *testing.T) { mpKilledPeer(t, op) })
	}
}

// mpKilledPeer: op "" an AllGather, "-p2p" a send to the victim, "-recv"
// a receive from it.
func mpKilledPeer(t *testing.T, op string) {
	watchdog(t, 40*time.Second)
	before := shmFiles(t)
	id, err := NewID()
	require.NoError(t, err)
	const n = 3
	cs := []*child{
		startChild(t, id, n, "0", "survivor"+op),
		startChild(t, id, n, "1", "survivor"+op),
		startChild(t, id, n, "2", "victim"+op),
	}
	for _, c := range cs {
		c.expectLine(t, "issued", 20*time.Second)
	}
	require.NoError(t, cs[2].cmd.Process.Kill())
	require.Error(t, cs[2].wait(t, 10*time.Second))
	requireChildOK(t, cs[:2], 20*time.Second)
	for _, c := range cs[:2] {
		require.Contains(t, c.output(), "MP remote-error")
	}
	requireNoLeftovers(t, before, cs)
}

// A peer that stays alive but never issues its part: the survivor's
// collective stays pending past CECOLL_TIMEOUT, the survivor fails with
// ncclRemoteError and its abort reaches the silent peer.
func TestMPTimeout(t *testing.T) {
	for _, op := range []string{"", "-p2p", "-recv"} { // an AllGather; a send never received; a receive never sent
		t.Run("op"+op, func(t *testing.T) {
			watchdog(t, 40*time.Second)
			id, err := NewID()
			require.NoError(t, err)
			cs := []*child{
				startChild(t, id, 2, "0", "survivor"+op, "CECOLL_TIMEOUT=1"),
				startChild(t, id, 2, "1", "victim"+op, "CECOLL_TIMEOUT=1"),
			}
			requireChildOK(t, cs, 30*time.Second)
			require.Contains(t, cs[0].output(), "no progress")
			require.Contains(t, cs[1].output(), "MP victim-error")
		})
	}
}

// CECOLL_CHECK=1: two ranks issue AllGathers of different counts (or an
// AlltoAll, in place on one rank only; or a receive shorter than its
// send, staged in several pieces); both get an asynchronous
// ncclInvalidUsage naming both sides, without any wait in the call.
func TestMPCheck(t *testing.T) {
	for _, role := range []string{"check", "check-inplace", "check-p2p"} {
		t.Run(role, func(t *testing.T) {
			watchdog(t, 40*time.Second)
			id, err := NewID()
			require.NoError(t, err)
			env := []string{"CECOLL_CHECK=1", "CECOLL_STAGING_BYTES=16K"}
			cs := []*child{
				startChild(t, id, 2, "0", role, env...),
				startChild(t, id, 2, "1", role, env...),
			}
			requireChildOK(t, cs, 30*time.Second)
		})
	}
}

func mpCheck(t *testing.T, rt hip.Runtime, c *Comm, inPlace bool) {
	n, me := c.Size(), c.Rank()
	const blk = 4096
	require.NoError(t, rt.SetDevice(c.Device()))
	s, err := rt.StreamCreate()
	require.NoError(t, err)
	buf, err := MemAlloc(rt, uintptr(2*n*blk))
	require.NoError(t, err)
	_, err = c.WindowRegister(buf, uintptr(2*n*blk), WinCollSymmetric)
	require.NoError(t, err)
	recv := buf + hip.DevicePtr(n*blk)
	require.NoError(t, c.Collective(ce.FuncAllGather, buf, recv, blk, 0, 0, s))
	require.NoError(t, rt.StreamSynchronize(s))
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, c.AsyncError())
	count := uintptr(blk)
	if me == 1 {
		count = blk / 2
	}
	start := time.Now()
	if inPlace {
		// Out of place on rank 0, in place on rank 1 (one block each).
		send := buf
		if me == 1 {
			send = recv
		}
		require.NoError(t, c.Collective(ce.FuncAlltoAll, send, recv, blk/uintptr(n), 0, 0, s))
	} else {
		require.NoError(t, c.Collective(ce.FuncAllGather, buf, recv, count, 0, 0, s))
	}
	require.Less(t, time.Since(start), time.Second, "the call waited")
	awaitAsyncErrors([]*Comm{c}, 10*time.Second)
	err = c.AsyncError()
	requireCode(t, result.InvalidUsage, err)
	if inPlace {
		require.Contains(t, err.Error(), "AlltoAll in place count")
		require.Regexp(t, `AlltoAll count \d+`, err.Error())
	} else {
		// By name, not number: the collective and the datatype.
		require.Contains(t, err.Error(), "AllGather count 4096 ncclInt8")
		require.Contains(t, err.Error(), "AllGather count 2048 ncclInt8")
	}
	fmt.Printf("MP check-error %v\n", err)
	require.NoError(t, c.Abort())
	require.NoError(t, rt.StreamSynchronize(s))
	require.NoError(t, rt.StreamDestroy(s))
	require.NoError(t, MemFree(rt, buf))
}

// mpCheckP2P: rank 0 sends three transfers to rank 1, whose second
// receive is shorter than its send (several 4 KiB pieces each: the rest
// of the send would feed the third receive). Both ranks get the
// mismatch by name, the calls do not wait, and Abort releases the
// streams.
func mpCheckP2P(t *testing.T, rt hip.Runtime, c *Comm) {
	me := c.Rank()
	require.NoError(t, rt.SetDevice(c.Device()))
	s, err := rt.StreamCreate()
	require.NoError(t, err)
	sizes := []uintptr{8192, 40000, 8192}
	fn := FuncSend
	if me == 1 {
		sizes[1] = 30000
		fn = FuncRecv
	}
	var bufs []hip.DevicePtr
	start := time.Now()
	for k, n := range sizes {
		p, err := MemAlloc(rt, n)
		require.NoError(t, err)
		bufs = append(bufs, p)
		err = c.P2P(fn, p, n, 0, 1-me, s)
		if k == 2 && err != nil {
			// The check may have failed the communicator already, once
			// the second pair was posted: a later call then fails with
			// its cause.
			requireCode(t, result.InvalidUsage, err)
			require.Contains(t, err.Error(), "receive #2 from rank 0 is 30000 bytes")
			continue
		}
		require.NoError(t, err, "transfer #%d", k+1)
	}
	require.Less(t, time.Since(start), time.Second, "the calls waited")
	awaitAsyncErrors([]*Comm{c}, 10*time.Second)
	err = c.AsyncError()
	requireCode(t, result.InvalidUsage, err)
	require.Contains(t, err.Error(), "rank 1's receive #2 from rank 0 is 30000 bytes")
	require.Contains(t, err.Error(), "rank 0's send #2 to rank 1 is 40000 bytes")
	fmt.Printf("MP check-error %v\n", err)
	require.NoError(t, c.Abort())
	require.NoError(t, rt.StreamSynchronize(s))
	require.NoError(t, rt.StreamDestroy(s))
	for _, p := range bufs {
		require.NoError(t, MemFree(rt, p))
	}
}

// TestMPChild is the children's side; it is skipped in a normal run.
func TestMPChild(t *testing.T) {
	role := os.Getenv(envRole)
	if role == "" {
		t.Skip("runs only as a child of the multi-process tests")
	}
	if role == "floodroot" {
		watchdog(t, 80*time.Second)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		floodRoot(t, newRT(t, 2))
		return
	}
	watchdog(t, 15*time.Second)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var id ID
	if os.Getenv(envID) == commIDRole {
		// Made here, as every process makes it from the given address.
		var err error
		id, err = NewID()
		require.NoError(t, err)
		require.True(t, id.FromCommID())
	} else {
		raw, err := hex.DecodeString(os.Getenv(envID))
		require.NoError(t, err)
		copy(id[:], raw)
	}
	n, err := strconv.Atoi(os.Getenv(envN))
	require.NoError(t, err)
	var ranks []int
	for _, s := range strings.Split(os.Getenv(envRanks), ",") {
		r, err := strconv.Atoi(s)
		require.NoError(t, err)
		ranks = append(ranks, r)
	}
	rt := newRT(t, 2)

	start := time.Now()
	comms := make([]*Comm, len(ranks))
	initErr := func() error {
		if len(ranks) == 1 {
			require.NoError(t, rt.SetDevice(ranks[0]%2))
			comms[0], err = InitRank(rt, id, n, ranks[0], DefaultConfig())
			return err
		}
		require.NoError(t, GroupStart())
		for i, r := range ranks {
			require.NoError(t, rt.SetDevice(r%2))
			comms[i], err = InitRank(rt, id, n, r, DefaultConfig())
			require.NoError(t, err)
		}
		return GroupEnd()
	}()
	if role == "expect" {
		want, _ := strconv.Atoi(os.Getenv(envWant))
		requireCode(t, result.Code(want), initErr)
		fmt.Printf("MP got %v\n", initErr)
		for _, c := range comms {
			if c != nil {
				c.Destroy()
			}
		}
		return
	}
	require.NoError(t, initErr)
	fmt.Printf("MP init %v\n", time.Since(start))
	defer func() { // after the Destroys below
		if f := os.Getenv(envDone); f != "" {
			require.NoError(t, os.WriteFile(f, nil, 0o600))
		}
		for f, dl := os.Getenv(envAwait), time.Now().Add(10*time.Second); f != "" && time.Now().Before(dl); time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(f); err == nil {
				break
			}
		}
	}()
	defer func() {
		for _, c := range comms {
			require.NoError(t, c.Destroy())
		}
	}()
	switch role {
	case "barrier":
		require.NoError(t, comms[0].Barrier())
	case "colls":
		mpCollectives(t, rt, comms, n)
	case "collsbarrier": // then wait for the other process (TestMPFlood's root)
		mpCollectives(t, rt, comms, n)
		require.NoError(t, comms[0].Barrier())
	case "check", "check-inplace":
		mpCheck(t, rt, comms[0], role == "check-inplace")
	case "check-p2p":
		mpCheckP2P(t, rt, comms[0])
	case "survivor", "victim", "survivor-p2p", "victim-p2p", "survivor-recv", "victim-recv":
		victim, op, _ := strings.Cut(role, "-")
		mpKill(t, rt, comms[0], victim == "victim", op)
	case "midsurvivor-recv", "midvictim-recv", "midsurvivor-send", "midvictim-send":
		mpKillMidTransfer(t, rt, comms, strings.HasPrefix(role, "midvictim"), strings.HasSuffix(role, "-recv"))
	case "p2p":
		mpP2P(t, rt, comms, n)
	}
}

// mpCollectives runs the four collectives on registered and unregistered
// ncclMemAlloc buffers, out of place and in place, and checks the bytes.
func mpCollectives(t *testing.T, rt hip.Runtime, comms []*Comm, n int) {
	const count = 1000 // int32 elements per block
	const blk = count * 4
	type rk struct {
		c        *Comm
		s        hip.Stream
		reg, raw hip.DevicePtr
		win      *Window
	}
	rs := make([]*rk, len(comms))
	size := uintptr(2 * n * blk)
	for i, c := range comms {
		require.NoError(t, rt.SetDevice(c.Device()))
		r := &rk{c: c}
		var err error
		r.s, err = rt.StreamCreate()
		require.NoError(t, err)
		r.reg, err = MemAlloc(rt, size)
		require.NoError(t, err)
		r.raw, err = MemAlloc(rt, size)
		require.NoError(t, err)
		rs[i] = r
	}
	// Collective registration: every local rank at once. First plain Go
	// memory, which ranks in other processes cannot map: refused on every
	// rank with InvalidArgument.
	var wg sync.WaitGroup
	errs := make([]error, len(rs))
	plain := make([]byte, 3*4096)
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			p := hip.DevicePtr(unsafePointer(&plain[0]))
			p = (p + 4095) &^ 4095
			_, errs[i] = r.c.WindowRegister(p, 4096, 0)
		}()
	}
	wg.Wait()
	runtime.KeepAlive(plain)
	for _, err := range errs {
		requireCode(t, result.InvalidArgument, err)
	}
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			r.win, errs[i] = r.c.WindowRegister(r.reg, size, WinCollSymmetric)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	pat := func(iter, r, k int) []byte {
		b := make([]byte, blk)
		for i := range b {
			b[i] = byte(iter*3 + r*37 + k*11 + i*7)
		}
		return b
	}
	put := func(p hip.DevicePtr, b []byte) { require.NoError(t, hip.CopyToDevice(rt, p, b)) }
	get := func(p hip.DevicePtr) []byte {
		b := make([]byte, blk)
		require.NoError(t, hip.CopyFromDevice(rt, b, p))
		return b
	}
	at := func(p hip.DevicePtr, k int) hip.DevicePtr { return p + hip.DevicePtr(k*blk) }
	iter := 0
	for _, mode := range []string{"registered", "unregistered"} {
		for _, fn := range []ce.Func{ce.FuncAllGather, ce.FuncAlltoAll, ce.FuncScatter, ce.FuncGather, ce.FuncBroadcast} {
			for _, inPlace := range []bool{false, true} {
				iter++
				root := iter % n
				how := fmt.Sprintf("%s %s inPlace=%v root=%d", mode, fn, inPlace, root)
				recvs := make([]hip.DevicePtr, len(rs))
				for i, r := range rs {
					me := r.c.Rank()
					base := r.reg
					if mode == "unregistered" {
						base = r.raw
					}
					S, R := base, base+hip.DevicePtr(n*blk)
					require.NoError(t, rt.SetDevice(r.c.Device()))
					require.NoError(t, rt.Memset(base, 0xee, size))
					send, recv := S, R
					switch fn {
					case ce.FuncAllGather:
						if inPlace {
							send = at(R, me)
						}
						put(send, pat(iter, me, 0))
					case ce.FuncAlltoAll:
						if inPlace {
							send = R
						}
						for k := range n {
							put(at(send, k), pat(iter, me, k))
						}
					case ce.FuncScatter:
						if me == root {
							for k := range n {
								put(at(S, k), pat(iter, me, k))
							}
						}
						if inPlace {
							// NCCL's in-place layout, on every rank: send
							// is buf, recv is buf + rank*count.
							recv = at(S, me)
						}
					case ce.FuncGather:
						if inPlace {
							// NCCL's in-place layout, on every rank: recv
							// is buf, send is buf + rank*count.
							send = at(R, me)
						}
						put(send, pat(iter, me, 0))
					case ce.FuncBroadcast:
						if inPlace {
							recv = S // ncclBcast: one buffer
						}
						if me == root {
							put(S, pat(iter, me, 0))
						}
					}
					recvs[i] = recv
					require.NoError(t, r.c.Collective(fn, send, recv, count, 2, root, r.s), how)
				}
				for i, r := range rs {
					me := r.c.Rank()
					require.NoError(t, rt.SetDevice(r.c.Device()))
					require.NoError(t, rt.StreamSynchronize(r.s), how)
					recv := recvs[i]
					switch fn {
					case ce.FuncAllGather:
						for k := range n {
							require.Equal(t, pat(iter, k, 0), get(at(recv, k)), "%s rank %d block %d", how, me, k)
						}
					case ce.FuncAlltoAll:
						for k := range n {
							require.Equal(t, pat(iter, k, me), get(at(recv, k)), "%s rank %d block %d", how, me, k)
						}
					case ce.FuncScatter:
						require.Equal(t, pat(iter, root, me), get(recv), "%s rank %d", how, me)
					case ce.FuncBroadcast:
						require.Equal(t, pat(iter, root, 0), get(recv), "%s rank %d", how, me)
					case ce.FuncGather:
						if me == root {
							for k := range n {
								require.Equal(t, pat(iter, k, 0), get(at(recv, k)), "%s block %d", how, k)
							}
						}
					}
				}
			}
		}
	}
	// No asynchronous error (with CECOLL_CHECK=1: no false mismatch once
	// the watchers have compared everything).
	time.Sleep(30 * time.Millisecond)
	for _, r := range rs {
		require.NoError(t, r.c.AsyncError())
	}
	for _, r := range rs {
		// Peers in other processes are imports; deregistration unmaps them.
		var imported []hip.DevicePtr
		for p := range n {
			if !r.c.node.boot.SameProcess(p) {
				pb := r.win.PeerBase(p)
				_, _, err := rt.MemGetAddressRange(pb)
				require.NoError(t, err, "rank %d's import of rank %d", r.c.Rank(), p)
				imported = append(imported, pb)
			}
		}
		require.NoError(t, r.c.WindowDeregister(r.win))
		for _, pb := range imported {
			_, _, err := rt.MemGetAddressRange(pb)
			require.Error(t, err, "an import survived deregistration")
		}
		require.NoError(t, rt.SetDevice(r.c.Device()))
		require.NoError(t, rt.StreamDestroy(r.s))
		require.NoError(t, MemFree(rt, r.reg))
		require.NoError(t, MemFree(rt, r.raw))
	}
}

// mpKill: every rank issues an AllGather (op "p2p": a send to the last
// rank, "recv": a receive from it); the victim then only waits to be
// killed, so the survivors' streams park on flags it will never write.
// Each survivor must see ncclRemoteError within a few seconds, its stream
// must drain after Abort, and Abort must return promptly.
func mpKill(t *testing.T, rt hip.Runtime, c *Comm, victim bool, op string) {
	n := c.Size()
	const blk = 4096
	require.NoError(t, rt.SetDevice(c.Device()))
	s, err := rt.StreamCreate()
	require.NoError(t, err)
	buf, err := MemAlloc(rt, uintptr(2*n*blk))
	require.NoError(t, err)
	w, err := c.WindowRegister(buf, uintptr(2*n*blk), WinCollSymmetric)
	require.NoError(t, err)
	if victim {
		// Killed by the parent, or (timeout test) told by the survivor's
		// abort that the communicator is dead.
		fmt.Println("MP issued")
		deadline := time.Now().Add(20 * time.Second)
		for c.AsyncError() == nil && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		requireCode(t, result.RemoteError, c.AsyncError())
		fmt.Printf("MP victim-error %v\n", c.AsyncError())
		require.NoError(t, c.Abort()) // frees the windows too
		require.NoError(t, rt.StreamDestroy(s))
		require.NoError(t, MemFree(rt, buf))
		return
	}
	switch op {
	case "p2p": // a send to the last rank, which never receives it
		require.NoError(t, c.P2P(FuncSend, buf, blk, 0, n-1, s))
	case "recv": // a receive from the last rank, which never sends
		require.NoError(t, c.P2P(FuncRecv, buf, blk, 0, n-1, s))
	default:
		require.NoError(t, c.Collective(ce.FuncAllGather, buf, buf+hip.DevicePtr(n*blk), blk, 0, 0, s))
	}
	fmt.Println("MP issued")
	deadline := time.Now().Add(20 * time.Second)
	var aerr error
	for aerr == nil && time.Now().Before(deadline) {
		aerr = c.AsyncError()
		time.Sleep(5 * time.Millisecond)
	}
	requireCode(t, result.RemoteError, aerr)
	fmt.Printf("MP remote-error %v\n", aerr)
	start := time.Now()
	require.NoError(t, c.Abort())
	require.Less(t, time.Since(start), 3*time.Second, "Abort took too long")
	// The engine's abort released the parked stream.
	require.NoError(t, rt.StreamSynchronize(s))
	_ = w
	require.NoError(t, rt.StreamDestroy(s))
	require.NoError(t, MemFree(rt, buf))
}

// BenchmarkMPBootstrap measures ncclCommInitRank across 2..8 processes:
// spawn to every child's communicator ready (process start included), and
// the slowest child's own InitRank time (connect, rendezvous, engine init
// with its window exchange).
func BenchmarkMPBootstrap(b *testing.B) {
	for n := 2; n <= 8; n++ {
		b.Run(fmt.Sprintf("procs=%d", n), func(b *testing.B) {
			var wall, slowest time.Duration
			for range b.N {
				id, err := NewID()
				require.NoError(b, err)
				start := time.Now()
				cs := make([]*child, n)
				for r := range n {
					cs[r] = startChild(b, id, n, strconv.Itoa(r), "barrier")
				}
				var worst time.Duration
				for _, c := range cs {
					d := c.initTime(b)
					worst = max(worst, d)
				}
				wall += time.Since(start)
				slowest += worst
				for _, c := range cs {
					select {
					case err := <-c.done:
						require.NoError(b, err, c.output())
					case <-time.After(20 * time.Second):
						c.cmd.Process.Kill()
						b.Fatalf("child hung:\n%s", c.output())
					}
				}
			}
			b.ReportMetric(float64(wall.Microseconds())/float64(b.N)/1000, "ms-spawn-to-ready")
			b.ReportMetric(float64(slowest.Microseconds())/float64(b.N)/1000, "ms-initrank")
		})
	}
}
