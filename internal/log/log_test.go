package log

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/param"
)

// Once the log is set up, a bad value of any variable is a WARN line in
// the log's file, once.
func TestParamWarningsReachTheLog(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cecoll-%p.log")
	t.Setenv("CECOLL_DEBUG", "info")
	t.Setenv("CECOLL_DEBUG_FILE", file)
	t.Setenv("CECOLL_TIMEOUT", "inf")
	param.Reset()
	t.Cleanup(param.Reset)
	Setup()
	require.True(t, Enabled(LevelInfo, Coll))
	require.False(t, Enabled(LevelTrace, Coll))
	for range 3 {
		require.Equal(t, param.Timeout.Default(), param.Timeout.Get())
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), fmt.Sprintf("cecoll-%d.log", os.Getpid())))
	require.NoError(t, err)
	require.Regexp(t, `^\S+:\d+:\d+ cecoll WARN CECOLL_TIMEOUT="inf": want seconds from 0.001 to 1e6; using the default 600\n$`, string(b))
}

// clearEnv blanks the log's variables (the twins too) for a test.
func clearEnv(t *testing.T) {
	for _, name := range []string{"CECOLL_DEBUG", "NCCL_DEBUG", "CECOLL_DEBUG_SUBSYS", "NCCL_DEBUG_SUBSYS",
		"CECOLL_DEBUG_FILE", "NCCL_DEBUG_FILE"} {
		t.Setenv(name, "")
	}
}

// The level and subsystems follow CECOLL_DEBUG and CECOLL_DEBUG_SUBSYS,
// else NCCL's twins with NCCL's meaning; a set CECOLL_ variable wins, and
// NCCL's default subsystems apply only to a level NCCL_DEBUG gave.
func TestSettings(t *testing.T) {
	for _, tc := range []struct {
		env   []string // name=value
		level Level
		mask  Subsys
		warns int
	}{
		{nil, LevelWarn, All, 0},
		{[]string{"NCCL_DEBUG=info"}, LevelInfo, Init | Bootstrap | Env, 0},
		{[]string{"NCCL_DEBUG=VERSION"}, LevelVersion, Init | Bootstrap | Env, 0},
		{[]string{"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=COLL,reg"}, LevelInfo, Coll | Reg, 0},
		{[]string{"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=ALL"}, LevelInfo, All, 0},
		{[]string{"NCCL_DEBUG=INFO", "CECOLL_DEBUG=TRACE"}, LevelTrace, All, 0},
		{[]string{"CECOLL_DEBUG=INFO"}, LevelInfo, All, 0},
		{[]string{"CECOLL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=^COLL"}, LevelInfo, All &^ Coll, 0},
		{[]string{"CECOLL_DEBUG_SUBSYS=REG", "NCCL_DEBUG_SUBSYS=COLL"}, LevelWarn, Reg, 0},
		{[]string{"CECOLL_DEBUG=none", "NCCL_DEBUG=INFO"}, LevelNone, All, 0},
		// A set CECOLL_DEBUG wins even when bad: its default, one warning.
		{[]string{"CECOLL_DEBUG=LOUD", "NCCL_DEBUG=INFO"}, LevelWarn, All, 1},
		{[]string{"NCCL_DEBUG=LOUD"}, LevelWarn, All, 1},
		{[]string{"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,WARP"}, LevelInfo, Init | Bootstrap | Env, 1},
	} {
		t.Run(strings.Join(tc.env, ","), func(t *testing.T) {
			clearEnv(t)
			var warns []string
			prev := param.SetWarn(func(msg string) { warns = append(warns, msg) })
			t.Cleanup(func() { param.SetWarn(prev) })
			param.Reset()
			t.Cleanup(param.Reset)
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			for range 3 { // read as often as the log might: warned once
				l, m := settings()
				require.Equal(t, tc.level, l)
				require.Equal(t, tc.mask, m, "mask %#x, want %#x", m, tc.mask)
			}
			require.Len(t, warns, tc.warns, "%q", warns)
		})
	}
}

// The subsystem bits follow internal/param's names, in order.
func TestSubsysNames(t *testing.T) {
	var names []string
	for _, info := range param.All() {
		if info.Name == "NCCL_DEBUG_SUBSYS" {
			names = info.Choices
		}
	}
	require.Len(t, names, 16)
	bits := map[string]Subsys{"INIT": Init, "COLL": Coll, "ENV": Env, "BOOTSTRAP": Bootstrap, "REG": Reg, "RAS": Ras}
	for i, n := range names {
		if b, ok := bits[n]; ok {
			require.Equal(t, Subsys(1)<<i, b, n)
		}
	}
	require.Equal(t, Subsys(1)<<len(names)-1, All)
}

// A debug file name is expanded as NCCL's: %h, %p and %%.
func TestExpand(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/x.log":         "/tmp/x.log",
		"/tmp/%h.%p.log":     "/tmp/node1.42.log",
		"/tmp/100%%-%p":      "/tmp/100%-42",
		"/tmp/%x%p%":         "/tmp/%x42%",
		"%h%h":               "node1node1",
		"/tmp/%%p-is-not-%p": "/tmp/%p-is-not-42",
	} {
		require.Equal(t, want, expand(in, "node1", 42), in)
	}
}

// A real NCCL opens NCCL_DEBUG_FILE with fopen("w") (emptying it) and
// writes at its own offset. Sharing the file with it, cecoll loses no
// line and clobbers none: its lines from before the other's opening are
// written again, and the other's descriptor is made O_APPEND.
func TestSharedFile(t *testing.T) {
	name := filepath.Join(t.TempDir(), "shared.log")
	a, err := openAppend(name)
	require.NoError(t, err)
	defer a.f.Close()
	line := func(who string, i int) []byte { return []byte(fmt.Sprintf("%s line %d\n", who, i)) }
	for i := range 3 {
		_, err := a.Write(line("cecoll", i))
		require.NoError(t, err)
	}
	// NCCL's fopen("w"): truncate, no O_APPEND.
	nccl, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	defer nccl.Close()
	for i := range 10 {
		_, err := nccl.Write(line("NCCL", i))
		require.NoError(t, err)
		if i%3 == 0 {
			_, err := a.Write(line("cecoll", 3+i))
			require.NoError(t, err)
		}
	}
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	var want []string
	for i := range 10 {
		want = append(want, strings.TrimSpace(string(line("NCCL", i))))
	}
	for _, i := range []int{0, 1, 2, 3, 6, 9, 12} {
		want = append(want, strings.TrimSpace(string(line("cecoll", i))))
	}
	require.ElementsMatch(t, want, got, "file:\n%s", b)
}

// The banner: alone on its line at VERSION, an INFO line from INFO up,
// nothing at WARN; once.
func TestBanner(t *testing.T) {
	Setup()
	oldLevel, oldMask, oldOut := level, mask, out
	t.Cleanup(func() { level, mask, out = oldLevel, oldMask, oldOut; bannerOnce = sync.Once{} })
	for _, tc := range []struct {
		l    Level
		want string
	}{
		{LevelWarn, ""},
		{LevelNone, ""},
		{LevelVersion, "cecoll version 9.9.9\n"},
		{LevelInfo, " cecoll INFO cecoll version 9.9.9\n"},
	} {
		var buf bytes.Buffer
		level, mask, out, bannerOnce = tc.l, ncclDefault, &buf, sync.Once{}
		Banner("cecoll version 9.9.9")
		Banner("cecoll version 9.9.9")
		if tc.want == "" || tc.want[0] != ' ' {
			require.Equal(t, tc.want, buf.String(), "level %d", tc.l)
		} else {
			require.True(t, strings.HasSuffix(buf.String(), tc.want), "level %d: %q", tc.l, buf.String())
			require.Equal(t, 1, strings.Count(buf.String(), "\n"))
		}
	}
}
