package amd

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/hip/hiptest"
)

// Fake library variants, built once by TestMain from testdata/fakehip.c.
const (
	fakeFull         = "full"
	fakeNoBatchCopy  = "nobatchcopy"  // no hipMemcpyBatchAsync (optional)
	fakeNoBatchMemOp = "nobatchmemop" // no hipStreamBatchMemOp (optional)
	fakeNoWrite32    = "nowrite32"    // no hipStreamWriteValue32 (required)
)

var (
	fakePaths   map[string]string
	fakeSkipMsg string
)

func TestMain(m *testing.M) {
	// The conformance suite's cross-process test re-executes this binary.
	hiptest.RunChildIfRequested(func() (hip.Runtime, error) {
		r, err := Open()
		if err != nil {
			return nil, err
		}
		return r, nil
	})
	dir, err := os.MkdirTemp("", "fakehip")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakePaths, fakeSkipMsg = buildFakes(dir)
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func buildFakes(dir string) (map[string]string, string) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return nil, "gcc not found: cannot build the fake libamdhip64"
	}
	variants := map[string][]string{
		fakeFull:         nil,
		fakeNoBatchCopy:  {"-DFAKE_NO_BATCH_COPY"},
		fakeNoBatchMemOp: {"-DFAKE_NO_BATCH_MEMOP"},
		fakeNoWrite32:    {"-DFAKE_NO_WRITE32"},
	}
	paths := make(map[string]string)
	for name, defs := range variants {
		out := filepath.Join(dir, "libfakehip_"+name+".so")
		args := append([]string{"-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-Wno-unused-parameter",
			"-o", out, "testdata/fakehip.c", "-lpthread"}, defs...)
		if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			return nil, fmt.Sprintf("building fake libamdhip64 (%s): %v\n%s", name, err, b)
		}
		paths[name] = out
	}
	return paths, ""
}

// fake drives one loaded variant's control functions.
type fake struct {
	t                                            *testing.T
	path                                         string
	lastCall, failNext, setVer, setN, setVMM, rs uintptr
}

// newFake loads a variant, resets its state and returns its controls. The
// tests share the fake's global state, so they do not run in parallel.
func newFake(t *testing.T, variant string) *fake {
	t.Helper()
	if fakeSkipMsg != "" {
		t.Skip(fakeSkipMsg)
	}
	path := fakePaths[variant]
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	f := &fake{t: t, path: path}
	for name, p := range map[string]*uintptr{
		"fake_last_call": &f.lastCall, "fake_fail_next": &f.failNext,
		"fake_set_driver_version": &f.setVer, "fake_set_device_count": &f.setN,
		"fake_set_vmm": &f.setVMM, "fake_reset": &f.rs,
	} {
		*p, err = purego.Dlsym(h, name)
		require.NoError(t, err, name)
	}
	purego.SyscallN(f.rs)
	return f
}

func cstr(s string) []byte { return append([]byte(s), 0) }

// last returns the fake's record of the last call of fn ("" if none).
func (f *fake) last(fn string) string {
	name := cstr(fn)
	buf := make([]byte, 1<<15)
	n, _, _ := purego.SyscallN(f.lastCall, uintptr(unsafe.Pointer(&name[0])),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	if int32(n) < 0 {
		return ""
	}
	return string(buf[:min(int(int32(n)), len(buf)-1)])
}

func (f *fake) failNextCall(fn string, code int) {
	name := cstr(fn)
	purego.SyscallN(f.failNext, uintptr(unsafe.Pointer(&name[0])), uintptr(code))
}

func (f *fake) version(v int) { purego.SyscallN(f.setVer, uintptr(v)) }
func (f *fake) devices(n int) { purego.SyscallN(f.setN, uintptr(n)) }
func (f *fake) vmm(on bool) {
	v := uintptr(0)
	if on {
		v = 1
	}
	purego.SyscallN(f.setVMM, v)
}

// open loads the fake as the HIP runtime.
func (f *fake) open() *Runtime {
	f.t.Helper()
	rt, err := OpenLibrary(f.path)
	require.NoError(f.t, err)
	return rt
}
