package param

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// captureWarn collects the warnings given during the test, with every
// parameter re-read from a clean slate.
func captureWarn(t *testing.T) func() []string {
	var mu sync.Mutex
	var got []string
	prev := SetWarn(func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, msg)
	})
	Reset()
	t.Cleanup(func() {
		SetWarn(prev)
		Reset()
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// get is Get, Err and the default of a parameter of any type.
type get struct {
	p   entry
	get func() any
	def any
	err func() error
}

func of[T any](p *Param[T]) get {
	return get{p: p, get: func() any { return p.Get() }, def: p.Default(), err: p.Err}
}

func TestBadValues(t *testing.T) {
	for _, tc := range []struct {
		p     get
		value string
	}{
		{of(Timeout), "inf"},
		{of(Timeout), "Infinity"},
		{of(Timeout), "NaN"},
		{of(Timeout), "1e10"},
		{of(Timeout), "1e-12"},
		{of(Timeout), "0"},
		{of(Timeout), "-1"},
		{of(Timeout), "abc"},
		{of(Timeout), "10s"},
		{of(AbortTimeout), "1e309"},
		{of(BootstrapTimeout), "-0"},
		{of(StagingBytes), "12X"},
		{of(StagingBytes), "99999999999999999999G"},
		{of(StagingBytes), "17179869184G"}, // fits in uint64 before the shift, not after
		{of(StagingBytes), "-1M"},
		{of(StagingBytes), "1"},    // below one page
		{of(StagingBytes), "128G"}, // above the range
		{of(StagingBytes), "G"},
		{of(IntraBatchSyncFreq), "0"},
		{of(IntraBatchSyncFreq), "2M"},
		{of(IntraBatchSyncThreshold), "0"},
		{of(HubBytes), "2048G"},
		{of(FlagWrite), "fast"},
		{of(Sync), "ring"},
		{of(Debug), "LOUD"},
		{of(Debug), "ABORT"},
		{of(NCCLDebug), "LOUD"},
		{of(DebugSubsys), "INIT,WARP"},
		{of(SocketFamily), "inet"},
		{of(NCCLSocketFamily), "AF_UNIX"},
		{of(Events), "off"},
		{of(Check), "yes"},
		{of(CheckPointers), "2"},
	} {
		name := tc.p.p.Info().Name
		t.Run(name+"="+tc.value, func(t *testing.T) {
			warnings := captureWarn(t)
			t.Setenv(name, tc.value)
			require.NotPanics(t, func() {
				require.Equal(t, tc.p.def, tc.p.get())
			})
			require.ErrorContains(t, tc.p.err(), name)
			got := warnings()
			require.Len(t, got, 1)
			require.Contains(t, got[0], name+"=")
			require.Contains(t, got[0], tc.value)
			require.Contains(t, got[0], "using the default "+tc.p.p.Info().Default)
		})
	}
}

func TestGoodValues(t *testing.T) {
	for _, tc := range []struct {
		p     get
		value string
		want  any
	}{
		{of(Timeout), "0.5", 500 * time.Millisecond},
		{of(Timeout), " 30 ", 30 * time.Second},
		{of(Timeout), "0.001", time.Millisecond},
		{of(Timeout), "1e6", 1e6 * time.Second},
		{of(AbortTimeout), "30", 30 * time.Second},
		{of(BootstrapTimeout), "0.2", 200 * time.Millisecond},
		{of(StagingBytes), "64K", uintptr(64 << 10)},
		{of(StagingBytes), "1m", uintptr(1 << 20)},
		{of(StagingBytes), "1048576", uintptr(1 << 20)},
		{of(StagingBytes), "0x10000", uintptr(64 << 10)},
		{of(StagingBytes), "2 G", uintptr(2 << 30)},
		{of(IntraBatchSyncFreq), "4", 4},
		{of(IntraBatchSyncFreq), "1M", 1 << 20},
		{of(IntraBatchSyncThreshold), "64M", uint64(64 << 20)},
		{of(HubBytes), "16K", int64(16 << 10)},
		{of(HubBytes), "0", int64(0)},
		{of(FlagWrite), "copy", "copy"},
		{of(Sync), "Star", "star"},
		{of(Debug), "info", "INFO"},
		{of(Backend), " HOST ", "host"},
		{of(Events), "0", false},
		{of(Check), "1", true},
		{of(CheckPointers), "1", true},
		{of(HostDevices), "3", 3},
		{of(HostChaos), "-42", int64(-42)},
		{of(HostInline), "0", false},
		{of(HostCaps), "noattrs, HIPBATCHES,,", []string{"noattrs", "hipbatches"}},
		{of(DebugFile), " /tmp/x-%p.log ", "/tmp/x-%p.log"},
		{of(Debug), "version", "VERSION"},
		{of(NCCLDebug), "Trace", "TRACE"},
		{of(DebugSubsys), "INIT,COLL", uint64(1 | 2)},
		{of(DebugSubsys), "all", uint64(1<<16 - 1)},
		{of(NCCLDebugSubsys), "^COLL, env", uint64((1<<16 - 1) &^ (2 | 1<<7))},
		{of(NCCLDebugSubsys), "^", uint64(1<<16 - 1)},
		{of(NCCLDebugSubsys), "ras,PROFILE", uint64(1<<15 | 1<<14)},
		{of(SocketFamily), "af_inet6", "AF_INET6"},
		{of(NCCLSocketFamily), "AF_INET", "AF_INET"},
		{of(CommID), "127.0.0.1:5000", "127.0.0.1:5000"},
		{of(CommID), "[::1]:5000", "[::1]:5000"},
		{of(CommID), "[fe80::1%eth0]:5000", "[fe80::1%eth0]:5000"},
		{of(NCCLCommID), " node-3.example:29500 ", "node-3.example:29500"},
		{of(CUDADeviceMaxConnections), "16", "16"},
	} {
		name := tc.p.p.Info().Name
		t.Run(name+"="+tc.value, func(t *testing.T) {
			warnings := captureWarn(t)
			t.Setenv(name, tc.value)
			require.Equal(t, tc.want, tc.p.get())
			require.NoError(t, tc.p.err())
			require.Empty(t, warnings())
		})
	}
}

// Unset and blank values are the default, silently.
func TestBlankIsDefault(t *testing.T) {
	for _, value := range []string{"", "  ", "\t"} {
		warnings := captureWarn(t)
		for _, info := range All() {
			t.Setenv(info.Name, value)
		}
		for _, p := range []get{of(Timeout), of(StagingBytes), of(Sync), of(Events), of(HostCaps), of(Backend)} {
			require.Equal(t, p.def, p.get())
			require.NoError(t, p.err())
		}
		require.False(t, Timeout.IsSet())
		require.Empty(t, warnings())
	}
}

// A bad value warns once per process, however often and wherever it is
// read, until Reset.
func TestWarnOnce(t *testing.T) {
	warnings := captureWarn(t)
	t.Setenv("CECOLL_TIMEOUT", "soon")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_ = Timeout.Get()
			}
		})
	}
	wg.Wait()
	require.Len(t, warnings(), 1)
	t.Setenv("CECOLL_TIMEOUT", "later")
	require.Equal(t, 600*time.Second, Timeout.Get())
	require.ErrorContains(t, Timeout.Err(), `"later"`)
	require.Len(t, warnings(), 1, "once per variable")
	Reset()
	require.Equal(t, 600*time.Second, Timeout.Get())
	require.Len(t, warnings(), 2, "Reset re-arms the warning")
	require.Contains(t, warnings()[1], `CECOLL_TIMEOUT="later"`)
}

// Get follows the environment without Reset, so tests may t.Setenv.
func TestFollowsEnvironment(t *testing.T) {
	captureWarn(t)
	t.Setenv("CECOLL_BOOTSTRAP_TIMEOUT", "1")
	require.Equal(t, time.Second, BootstrapTimeout.Get())
	t.Setenv("CECOLL_BOOTSTRAP_TIMEOUT", "2")
	require.Equal(t, 2*time.Second, BootstrapTimeout.Get())
}

// Strict parameters give no warning: their readers refuse the value.
func TestStrict(t *testing.T) {
	warnings := captureWarn(t)
	t.Setenv("CECOLL_BACKEND", "cuda")
	t.Setenv("CECOLL_HOST_CAPS", "noattrs,warp")
	require.Equal(t, "auto", Backend.Get())
	require.EqualError(t, Backend.Err(), `CECOLL_BACKEND="cuda": want one of auto, nvidia, amd, host`)
	require.Nil(t, HostCaps.Get())
	require.ErrorContains(t, HostCaps.Err(), `unknown word "warp"`)
	// A root address that does not parse fails ncclGetUniqueId, twin or not.
	t.Setenv("CECOLL_COMM_ID", "")
	for _, v := range []string{"127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536", ":5000", "::1:5000", "host:port", "a b:1"} {
		t.Setenv("NCCL_COMM_ID", v)
		require.Equal(t, "", CommID.Get(), v)
		require.ErrorContains(t, CommID.Err(), `NCCL_COMM_ID="`+v+`"`)
	}
	t.Setenv("CECOLL_COMM_ID", "[::1]")
	require.ErrorContains(t, CommID.Err(), `CECOLL_COMM_ID="[::1]"`)
	require.Empty(t, warnings())
}

func TestSocketIfnameFallback(t *testing.T) {
	captureWarn(t)
	t.Setenv("CECOLL_SOCKET_IFNAME", "")
	t.Setenv("NCCL_SOCKET_IFNAME", "")
	require.Equal(t, "", SocketIfname.Get())
	t.Setenv("NCCL_SOCKET_IFNAME", "=eth0")
	require.Equal(t, "=eth0", SocketIfname.Get())
	t.Setenv("CECOLL_SOCKET_IFNAME", "^docker")
	require.Equal(t, "^docker", SocketIfname.Get())
}

// Each CECOLL_ variable reads its NCCL_ twin when blank, and wins when
// set, bad values included; From names the variable that answered.
func TestTwins(t *testing.T) {
	for _, tc := range []struct {
		own, nccl get
		text      string // a good text for both
		want      any    // its value
	}{
		{of(Debug), of(NCCLDebug), "info", "INFO"},
		{of(DebugSubsys), of(NCCLDebugSubsys), "COLL", uint64(2)},
		{of(DebugFile), of(NCCLDebugFile), "/tmp/n.log", "/tmp/n.log"},
		{of(SocketFamily), of(NCCLSocketFamily), "AF_INET6", "AF_INET6"},
		{of(SocketIfname), of(NCCLSocketIfname), "eth", "eth"},
		{of(CommID), of(NCCLCommID), "127.0.0.1:7", "127.0.0.1:7"},
	} {
		own, nccl := tc.own.p.Info().Name, tc.nccl.p.Info().Name
		t.Run(own, func(t *testing.T) {
			warnings := captureWarn(t)
			from := func() string { return tc.own.p.(interface{ From() string }).From() }
			t.Setenv(own, "")
			t.Setenv(nccl, "")
			require.Equal(t, tc.own.def, tc.own.get())
			require.Equal(t, "", from())
			t.Setenv(nccl, tc.text)
			require.Equal(t, tc.want, tc.own.get(), "%s blank: %s's value", own, nccl)
			require.Equal(t, nccl, from())
			other := map[string]string{"info": "TRACE", "COLL": "REG", "/tmp/n.log": "/tmp/c.log",
				"AF_INET6": "AF_INET", "eth": "ib", "127.0.0.1:7": "127.0.0.1:8"}[tc.text]
			t.Setenv(own, other)
			require.NotEqual(t, tc.want, tc.own.get(), "%s set: its value", own)
			require.Equal(t, own, from())
			t.Setenv(own, "bad value ^")
			got := tc.own.get()
			if tc.own.err() != nil {
				require.Equal(t, tc.own.def, got, "%s bad: its default, not %s", own, nccl)
				require.Equal(t, "", from())
				require.ErrorContains(t, tc.own.err(), own+"=")
				if !tc.own.p.Info().Strict {
					require.Len(t, warnings(), 1)
				}
			}
		})
	}
}

// NCCL_COMM_ID is the real library's while one is loaded: it stops
// standing in for CECOLL_COMM_ID, which still counts.
func TestCommIDForwarding(t *testing.T) {
	captureWarn(t)
	t.Cleanup(func() { SetForwarding(false) })
	t.Setenv("CECOLL_COMM_ID", "")
	t.Setenv("NCCL_COMM_ID", "127.0.0.1:4000")
	require.Equal(t, "127.0.0.1:4000", CommID.Get())
	SetForwarding(true)
	require.Equal(t, "", CommID.Get())
	require.Equal(t, "", CommID.From())
	require.Equal(t, "127.0.0.1:4000", NCCLCommID.Get(), "still readable as the real library's")
	t.Setenv("CECOLL_COMM_ID", "127.0.0.1:4001")
	require.Equal(t, "127.0.0.1:4001", CommID.Get())
	// The other twins are not the real library's alone.
	t.Setenv("CECOLL_DEBUG", "")
	t.Setenv("NCCL_DEBUG", "INFO")
	require.Equal(t, "INFO", Debug.Get())
}

func TestParse(t *testing.T) {
	v, err := Sync.Parse("ALLPAIRS")
	require.NoError(t, err)
	require.Equal(t, "allpairs", v)
	v, err = Sync.Parse(" ")
	require.NoError(t, err)
	require.Equal(t, "auto", v)
	_, err = Sync.Parse("tree")
	require.EqualError(t, err, `CECOLL_SYNC="tree": want one of auto, allpairs, star`)
}

func TestAll(t *testing.T) {
	seen := map[string]bool{}
	external := map[string]bool{"NCCL_SOCKET_IFNAME": true, "CUDA_DEVICE_MAX_CONNECTIONS": true, "NCCL_CTA_POLICY": true, "LD_LIBRARY_PATH": true,
		"NCCL_DEBUG": true, "NCCL_DEBUG_SUBSYS": true, "NCCL_DEBUG_FILE": true, "NCCL_SOCKET_FAMILY": true, "NCCL_COMM_ID": true, "CUDA_MPS_PIPE_DIRECTORY": true}
	for _, info := range All() {
		require.False(t, seen[info.Name], "%s declared twice", info.Name)
		seen[info.Name] = true
		require.True(t, strings.HasPrefix(info.Name, "CECOLL_") || external[info.Name], info.Name)
		require.Contains(t, []Class{User, Tuning, Host}, info.Class, info.Name)
		require.NotEmpty(t, info.Default, info.Name)
		require.NotEmpty(t, info.Accepts, info.Name)
		require.NotEmpty(t, info.Doc, info.Name)
		require.NotContains(t, info.Doc, "\n", "%s: one line", info.Name)
		require.Equal(t, strings.HasPrefix(info.Name, "CECOLL_HOST_"), info.Class == Host, info.Name)
	}
	for name := range external {
		require.True(t, seen[name], name)
	}
}

// Reading a parameter whose text has not changed allocates nothing, so it
// may sit on a launch path.
func TestGetAllocs(t *testing.T) {
	captureWarn(t)
	t.Setenv("CECOLL_STAGING_BYTES", "64K")
	t.Setenv("CECOLL_SYNC", "star")
	_ = StagingBytes.Get()
	_ = Sync.Get()
	require.Zero(t, testing.AllocsPerRun(100, func() {
		_ = StagingBytes.Get()
		_ = Sync.Get()
		_ = Timeout.Get()
	}))
}

func BenchmarkGet(b *testing.B) {
	b.Setenv("CECOLL_TIMEOUT", "30")
	for b.Loop() {
		_ = Timeout.Get()
	}
}
