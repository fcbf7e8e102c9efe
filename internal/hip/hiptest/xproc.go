package hiptest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
)

// The child process learns its role and parameters from the environment;
// the exported allocation arrives as file descriptor 3 (exec.Cmd.ExtraFiles).
const (
	envRole    = "HIPTEST_CHILD"
	envSize    = "HIPTEST_CHILD_SIZE"
	envValue   = "HIPTEST_CHILD_VALUE"
	envDevice  = "HIPTEST_CHILD_DEVICE"
	envTimeout = "HIPTEST_CHILD_TIMEOUT"
	roleWait   = "wait-write"
	childFD    = 3
	childOK    = "hiptest child: ok"
)

// Layout of the shared allocation, in pages of the parent (words are flags).
const (
	xReady = 0 // word: the child writes 1 once it has mapped the memory
	xGo    = 1 // word: the parent writes v
	xDone  = 2 // word: the child writes v+1 after its copy
)

// The data region src..src+n and the copy's destination dst..dst+n do not
// overlap; dst is odd and its copy crosses a page boundary.
func xLayout() (size, src, dst, n uintptr) {
	page := uintptr(os.Getpagesize())
	return 4 * page, page, 2*page + 261, page + 123
}

// RunChildIfRequested runs the child side of a cross-process test and
// exits the process when this process was started as one; otherwise it
// returns at once. Call it first in TestMain, with a constructor of the
// backend under test (the child builds its own runtime):
//
//	func TestMain(m *testing.M) {
//		hiptest.RunChildIfRequested(func() (hip.Runtime, error) { return host.New(host.Config{}) })
//		os.Exit(m.Run())
//	}
func RunChildIfRequested(newRuntime func() (hip.Runtime, error)) {
	role := os.Getenv(envRole)
	if role == "" {
		return
	}
	code := 0
	if err := runChild(role, newRuntime); err != nil {
		fmt.Fprintf(os.Stderr, "hiptest child (%s): %v\n", role, err)
		code = 2
	} else {
		fmt.Println(childOK)
	}
	os.Exit(code)
}

func envUint(name string) (uint64, error) {
	v, err := strconv.ParseUint(os.Getenv(name), 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// runChild maps the parent's allocation, announces itself, waits for the
// parent's value, copies the parent's data and answers with value+1. Its
// signals into the parent's memory are write-values, or copies where
// Caps().PeerWriteValue is false.
func runChild(role string, newRuntime func() (hip.Runtime, error)) error {
	if role != roleWait {
		return fmt.Errorf("unknown role %q", role)
	}
	size, err := envUint(envSize)
	if err != nil {
		return err
	}
	v64, err := envUint(envValue)
	if err != nil {
		return err
	}
	dev, err := envUint(envDevice)
	if err != nil {
		return err
	}
	timeout, err := time.ParseDuration(os.Getenv(envTimeout))
	if err != nil {
		return fmt.Errorf("%s: %w", envTimeout, err)
	}
	v := uint32(v64)
	runtime.LockOSThread()
	rt, err := newRuntime()
	if err != nil {
		return fmt.Errorf("new runtime: %w", err)
	}
	if err := rt.SetDevice(int(dev)); err != nil {
		return fmt.Errorf("SetDevice: %w", err)
	}
	p, err := rt.MemImport(childFD, uintptr(size))
	if err != nil {
		return fmt.Errorf("MemImport: %w", err)
	}
	s, err := rt.StreamCreate()
	if err != nil {
		return fmt.Errorf("StreamCreate: %w", err)
	}
	local, err := rt.MemAlloc(8)
	if err != nil {
		return fmt.Errorf("MemAlloc: %w", err)
	}
	if err := prepareSignal(rt, local, 1, v+1); err != nil {
		return fmt.Errorf("preparing signals: %w", err)
	}
	_, src, dst, n := xLayout()
	if err := signal(rt, s, word(p, xReady), 1, word(local, 0)); err != nil {
		return fmt.Errorf("signalling ready: %w", err)
	}
	if err := rt.StreamBatchMemOp(s, []hip.MemOp{hip.WaitValue32(word(p, xGo), v, hip.WaitEQ)}); err != nil {
		return fmt.Errorf("StreamBatchMemOp: %w", err)
	}
	if err := rt.MemcpyAsync(p+hip.DevicePtr(dst), p+hip.DevicePtr(src), n, s); err != nil {
		return fmt.Errorf("MemcpyAsync: %w", err)
	}
	if err := signal(rt, s, word(p, xDone), v+1, word(local, 1)); err != nil {
		return fmt.Errorf("signalling done: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := rt.SetDevice(int(dev)); err != nil {
			done <- err
			return
		}
		done <- rt.StreamSynchronize(s)
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("StreamSynchronize: %w", err)
		}
	case <-time.After(timeout):
		return fmt.Errorf("no value %#x from the parent within %v", v, timeout)
	}
	if err := rt.StreamDestroy(s); err != nil {
		return fmt.Errorf("StreamDestroy: %w", err)
	}
	if err := rt.MemFree(p); err != nil {
		return fmt.Errorf("MemFree of the imported mapping: %w", err)
	}
	if err := rt.MemFree(local); err != nil {
		return fmt.Errorf("MemFree: %w", err)
	}
	return nil
}

// syncBuffer is a bytes.Buffer safe for the child's stdout and stderr
// copiers and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// testCrossProcess: the parent allocates and exports; a child process (this
// test binary, re-executed) imports, announces itself with a write-value,
// waits for a value the parent writes, copies the parent's data inside the
// shared allocation and answers with a write-value the parent waits for.
func testCrossProcess(e *env) {
	if !e.opts.CrossProcess {
		e.t.Skip("Options.CrossProcess is off")
	}
	size, src, dst, n := xLayout()
	p := e.zeroed(size)
	data := e.random(n)
	e.write(p+hip.DevicePtr(src), data)
	require.NoError(e.t, e.rt.Memset(p+hip.DevicePtr(dst), poison, n))
	fd, err := e.rt.MemExport(p)
	if errors.Is(err, hip.ErrNotSupported) {
		e.t.Skipf("%s: MemExport not supported", e.rt.Name())
	}
	require.NoError(e.t, err, "MemExport")
	f := os.NewFile(uintptr(fd), "hiptest-export")
	defer f.Close()
	// The child maps the whole allocation as the backend rounded it (GPU
	// backends round to their granularity).
	_, mapped, err := e.rt.MemGetAddressRange(p)
	require.NoError(e.t, err)

	v := 0x10000 + uint32(e.rng.IntN(1<<20))
	budget := e.waitBudget()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$") // runs no test if TestMain lacks the hook
	cmd.Env = append(os.Environ(),
		envRole+"="+roleWait,
		envSize+"="+strconv.FormatUint(uint64(mapped), 10),
		envValue+"="+strconv.FormatUint(uint64(v), 10),
		envDevice+"="+strconv.Itoa(e.opts.Device),
		envTimeout+"="+(budget*3/4).String())
	// The race detector sleeps a second before a process exits; the child
	// is waited for, so skip that.
	cmd.Env = append(cmd.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Env = append(cmd.Env, e.opts.ChildEnv...)
	cmd.ExtraFiles = []*os.File{f}
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(e.t, cmd.Start(), "starting the child")
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	e.releaser()
	s := e.stream()
	e.memops(s, hip.WaitValue32(word(p, xReady), 1, hip.WaitEQ), hip.WriteValue32(word(p, xGo), v),
		hip.WaitValue32(word(p, xDone), v+1, hip.WaitEQ))
	synced := e.start(func() error { return e.rt.StreamSynchronize(s) })

	// unblock lets our stream finish when the child cannot, so that the
	// cleanup does not wait on it.
	unblock := func() {
		e.releaseWith(word(p, xReady), 1)
		e.releaseWith(word(p, xDone), v+1)
	}
	timer := time.NewTimer(budget)
	defer timer.Stop()
	childDone := false
	for synced != nil || !childDone {
		select {
		case err := <-synced:
			require.NoError(e.t, err, "StreamSynchronize of the parent's stream")
			synced = nil
		case err := <-exited:
			childDone = true
			if err != nil || !bytes.Contains([]byte(out.String()), []byte(childOK)) {
				unblock()
				if err == nil {
					err = errors.New("the child ran no role: does TestMain call hiptest.RunChildIfRequested?")
				}
				e.t.Fatalf("child process: %v\n--- child output ---\n%s", err, out.String())
			}
		case <-timer.C:
			cancel()
			unblock()
			e.t.Fatalf("cross-process wait/write did not finish within %v (child done: %v)\n--- child output ---\n%s",
				budget, childDone, out.String())
		}
	}
	require.Equal(e.t, uint32(v+1), e.read32(word(p, xDone)))
	requireBytes(e.t, data, e.read(p+hip.DevicePtr(dst), n), "the child's copy inside the shared allocation")
}
