package forward

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"cecoll/internal/param"
	"cecoll/internal/result"
)

// stubLib is a Lib that only has a name.
type stubLib struct{ name string }

func (l stubLib) Name() string                   { return l.name }
func (l stubLib) Version() int                   { return 22809 }
func (stubLib) GetUniqueID(*[IDBytes]byte) error { return nil }
func (stubLib) InitRank(int, *[IDBytes]byte, int, []byte) (Handle, error) {
	return 1, nil
}
func (stubLib) InitAll(int, []int) ([]Handle, error)                { return nil, nil }
func (stubLib) Split(Handle, int, int, []byte) (Handle, error)      { return 0, nil }
func (stubLib) Shrink(Handle, []int32, []byte, int) (Handle, error) { return 0, nil }
func (stubLib) Finalize(Handle) error                               { return nil }
func (stubLib) Destroy(Handle) error                                { return nil }
func (stubLib) Abort(Handle) error                                  { return nil }
func (stubLib) AsyncError(Handle) error                             { return nil }
func (stubLib) Register(Handle, uintptr, uintptr) (Handle, error)   { return 0, nil }
func (stubLib) Deregister(Handle, Handle) error                     { return nil }
func (stubLib) WindowRegister(Handle, uintptr, uintptr, int) (Handle, error) {
	return 0, nil
}
func (stubLib) WindowDeregister(Handle, Handle) error                        { return nil }
func (stubLib) GroupStart() error                                            { return nil }
func (stubLib) GroupEnd() error                                              { return nil }
func (stubLib) GroupSimulateEnd(unsafe.Pointer) error                        { return nil }
func (stubLib) Send(_, _ uintptr, _ int32, _ int, _ Handle, _ uintptr) error { return nil }
func (stubLib) Recv(_, _ uintptr, _ int32, _ int, _ Handle, _ uintptr) error { return nil }

// fakeLoader records what Load asks of the dynamic loader.
type fakeLoader struct {
	self    string
	next    Lib
	objects []string
	good    map[string]bool // paths Open accepts
	opened  []string
}

func (l *fakeLoader) Self() string       { return l.self }
func (l *fakeLoader) Next() (Lib, error) { return l.next, nil }
func (l *fakeLoader) Objects() []string  { return l.objects }
func (l *fakeLoader) Open(path string) (Lib, error) {
	l.opened = append(l.opened, path)
	if l.good[path] {
		return stubLib{name: path}, nil
	}
	return nil, errors.New("not a library")
}

func touch(t *testing.T, path string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("x"), 0o644))
	return path
}

func loadWith(t *testing.T, l *fakeLoader) (Lib, error) {
	t.Helper()
	prev, prevErr := Current()
	t.Cleanup(func() { Install(prev, prevErr) })
	param.Reset()
	return Load(l)
}

func TestLoadOrder(t *testing.T) {
	dir := t.TempDir()
	self := touch(t, filepath.Join(dir, "dropin", "libnccl.so.2"))
	real := touch(t, filepath.Join(dir, "real", "libnccl.so.2"))
	torch := touch(t, filepath.Join(dir, "site", "nvidia", "nccl", "lib", "libnccl.so.2"))
	link := filepath.Join(dir, "alias", "libnccl.so.2")
	require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
	require.NoError(t, os.Symlink(self, link))
	torchObj := filepath.Join(dir, "site", "torch", "lib", "libtorch_cuda.so")
	t.Setenv("LD_LIBRARY_PATH", "")
	t.Setenv("CECOLL_NCCL_LIB", "")

	t.Run("CECOLL_NCCL_LIB first", func(t *testing.T) {
		t.Setenv("CECOLL_NCCL_LIB", real)
		l := &fakeLoader{self: self, next: stubLib{"linked"}, good: map[string]bool{real: true}}
		lib, err := loadWith(t, l)
		require.NoError(t, err)
		require.Equal(t, real, lib.Name())
		require.Equal(t, []string{real}, l.opened)
	})
	t.Run("CECOLL_NCCL_LIB that does not load is an error", func(t *testing.T) {
		t.Setenv("CECOLL_NCCL_LIB", "/nonexistent/libnccl.so.2")
		l := &fakeLoader{self: self, next: stubLib{"linked"}}
		lib, err := loadWith(t, l)
		require.Nil(t, lib)
		require.Equal(t, result.SystemError, result.Of(err))
		cur, curErr := Current()
		require.Nil(t, cur)
		require.Equal(t, err, curErr, "communicator creation fails with it")
	})
	t.Run("preloaded: the library the program linked", func(t *testing.T) {
		l := &fakeLoader{self: self, next: stubLib{"linked"}}
		lib, err := loadWith(t, l)
		require.NoError(t, err)
		require.Equal(t, "linked", lib.Name())
		require.Empty(t, l.opened)
	})
	t.Run("preloaded, the real one loaded in a local scope (torch): that one", func(t *testing.T) {
		ce := touch(t, filepath.Join(dir, "build", "libcecoll.so"))
		alias := filepath.Join(dir, "alias2", "libnccl.so.2")
		require.NoError(t, os.MkdirAll(filepath.Dir(alias), 0o755))
		require.NoError(t, os.Symlink(ce, alias))
		l := &fakeLoader{self: ce, objects: []string{"/usr/lib/libc.so.6", ce, alias, torchObj, torch},
			good: map[string]bool{torch: true, ce: true, alias: true}}
		lib, err := loadWith(t, l)
		require.NoError(t, err)
		require.Equal(t, torch, lib.Name())
		require.Equal(t, []string{torch}, l.opened, "cecoll's own file, under any name, is skipped")
	})
	t.Run("linked as libcecoll: copy engines only", func(t *testing.T) {
		l := &fakeLoader{self: filepath.Join(dir, "libcecoll.so"), good: map[string]bool{real: true}}
		t.Setenv("LD_LIBRARY_PATH", filepath.Dir(real))
		lib, err := loadWith(t, l)
		require.NoError(t, err)
		require.Nil(t, lib)
		require.Empty(t, l.opened)
	})
	t.Run("in place: the loader's path, never itself", func(t *testing.T) {
		t.Setenv("LD_LIBRARY_PATH", filepath.Dir(link)+":"+filepath.Dir(self)+":"+filepath.Dir(real))
		l := &fakeLoader{self: self, good: map[string]bool{real: true, self: true, link: true}}
		lib, err := loadWith(t, l)
		require.NoError(t, err)
		require.Equal(t, real, lib.Name())
		require.Equal(t, []string{real}, l.opened, "cecoll's own file, under any name, is skipped")
	})
	t.Run("in place: torch's wheel", func(t *testing.T) {
		l := &fakeLoader{self: self, objects: []string{"/usr/lib/libc.so.6", torchObj}, good: map[string]bool{torch: true}}
		lib, err := loadWith(t, l)
		require.NoError(t, err)
		require.Equal(t, torch, lib.Name())
	})
	t.Run("in place, nothing found: copy engines only", func(t *testing.T) {
		for _, p := range Candidates("libnccl.so.2", "", nil) {
			if _, err := os.Stat(p); err == nil {
				t.Skipf("this machine has %s", p)
			}
		}
		l := &fakeLoader{self: self}
		lib, err := loadWith(t, l)
		require.NoError(t, err)
		require.Nil(t, lib)
	})
}

func TestCandidates(t *testing.T) {
	c := Candidates("librccl.so.1", "/a::/b", []string{"/s/torch/lib/libtorch_hip.so"})
	require.Equal(t, "/a/librccl.so.1", c[0])
	require.Equal(t, "/b/librccl.so.1", c[1])
	require.Equal(t, "/s/torch/lib/librccl.so.1", c[len(c)-1], "ROCm's torch wheel bundles RCCL in torch/lib")
	c = Candidates("libnccl.so.2", "", []string{"/s/torch/lib/libtorch_cuda.so"})
	require.Equal(t, "/s/nvidia/nccl/lib/libnccl.so.2", c[len(c)-1])
	require.Equal(t, "libnccl.so.2", InPlaceName("libnccl.so.2.28.9"))
	require.Equal(t, "librccl.so.1", InPlaceName("librccl.so"))
	require.Equal(t, "", InPlaceName("libcecoll.so"))
}

func TestPolicy(t *testing.T) {
	auto := Policy{Bytes: 64 << 20}
	for _, tc := range []struct {
		p    Policy
		c    Call
		ce   bool
		why  Why
		name string
	}{
		{auto, Call{Bytes: 1 << 20}, false, WhySmall, "small"},
		{auto, Call{Bytes: 64 << 20}, true, WhyLarge, "at the threshold"},
		{auto, Call{Bytes: 8, InWindow: true}, true, WhyWindow, "window"},
		{auto, Call{Bytes: 8, ZeroCTA: true}, true, WhyZeroCTA, "zero-SM call"},
		{Policy{Bytes: 64 << 20, ZeroCTA: true}, Call{Bytes: 8}, true, WhyZeroCTA, "zero-SM communicator"},
		{Policy{Route: RouteCE, Bytes: 64 << 20}, Call{Bytes: 8}, true, WhyRouteCE, "ce"},
		{Policy{Route: RouteNCCL, Bytes: 64 << 20, ZeroCTA: true}, Call{Bytes: 1 << 30, InWindow: true}, false, WhyRouteNCCL, "nccl"},
	} {
		ce, why := tc.p.CE(tc.c)
		require.Equal(t, tc.ce, ce, tc.name)
		require.Equal(t, tc.why, why, tc.name)
	}
}

func TestPolicyFromEnv(t *testing.T) {
	t.Setenv("CECOLL_ROUTE", "nccl")
	t.Setenv("CECOLL_ROUTE_BYTES", "1M")
	t.Setenv("NCCL_CTA_POLICY", "2")
	param.Reset()
	require.Equal(t, Policy{Route: RouteNCCL, Bytes: 1 << 20, ZeroCTA: true}, PolicyFromEnv(0, false), "NCCL_CTA_POLICY when the config leaves it unset")
	require.Equal(t, Policy{Route: RouteNCCL, Bytes: 1 << 20}, PolicyFromEnv(1, true), "the config's CTAPolicy first")
	t.Setenv("CECOLL_ROUTE", "")
	t.Setenv("CECOLL_ROUTE_BYTES", "")
	t.Setenv("NCCL_CTA_POLICY", "")
	require.Equal(t, Policy{Bytes: 64 << 20, ZeroCTA: true}, PolicyFromEnv(CTAPolicyZero, true))
	a, b := PolicyFromEnv(0, false).Encode(), PolicyFromEnv(CTAPolicyZero, true).Encode()
	require.NotEqual(t, a, b, "the ranks compare what routes")
}

// Note logs once per kind, size class and way, and allocates nothing after.
func TestNoteAllocs(t *testing.T) {
	Note(2, "AllGather", 4096, true, WhyLarge)
	require.Zero(t, testing.AllocsPerRun(100, func() { Note(2, "AllGather", 5000, true, WhyLarge) }))
}

// At CECOLL_DEBUG=INFO a route is logged once per kind, size class and
// way: the point-to-point kinds and Broadcast as the collectives. The log
// is set up once per process from the environment, so the calls run in a
// child (this test binary again) and the parent reads its log file.
func TestNoteOncePerKindAndClass(t *testing.T) {
	if os.Getenv("FORWARD_NOTE_CHILD") == "1" {
		for range 2 { // twice: logged once
			Note(6, "Send", 4096, true, WhyLarge)
			Note(6, "Send", 8191, true, WhyLarge)  // the same class
			Note(6, "Send", 8192, true, WhyLarge)  // the next one
			Note(7, "Recv", 4096, true, WhyLarge)  // another kind
			Note(7, "Recv", 4096, false, WhySmall) // another way
			Note(0, "Broadcast", 100, false, WhySmall)
		}
		return
	}
	logf := filepath.Join(t.TempDir(), "cecoll.log")
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoteOncePerKindAndClass$", "-test.count=1")
	cmd.Env = append(os.Environ(), "FORWARD_NOTE_CHILD=1", "CECOLL_DEBUG=INFO", "CECOLL_DEBUG_SUBSYS=ALL", "CECOLL_DEBUG_FILE="+logf)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	b, err := os.ReadFile(logf)
	require.NoError(t, err)
	var routes []string
	for _, l := range strings.Split(string(b), "\n") {
		if i := strings.Index(l, "route: "); i >= 0 {
			routes = append(routes, l[i:])
		}
	}
	require.ElementsMatch(t, []string{
		"route: Send with 4096-8191 byte blocks -> copy engines (" + WhyLarge.String() + ")",
		"route: Send with 8192-16383 byte blocks -> copy engines (" + WhyLarge.String() + ")",
		"route: Recv with 4096-8191 byte blocks -> copy engines (" + WhyLarge.String() + ")",
		"route: Recv with 4096-8191 byte blocks -> the real library (" + WhySmall.String() + ")",
		"route: Broadcast with 64-127 byte blocks -> the real library (" + WhySmall.String() + ")",
	}, routes)
}
