package backend

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/hip/amd"
	"cecoll/internal/hip/nvidia"
)

// closeHost stops a host runtime's workers at the end of the test.
func closeHost(t *testing.T, rt hip.Runtime) {
	if c, ok := rt.(interface{ Close() }); ok {
		t.Cleanup(c.Close)
	}
}

// captureLog collects Logf output for the test.
func captureLog(t *testing.T) *[]string {
	var mu sync.Mutex
	var lines []string
	old := Logf
	Logf = func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf(format, args...))
	}
	t.Cleanup(func() { Logf = old })
	return &lines
}

// fakeRT is a GPU backend stand-in for the selection tests.
type fakeRT struct {
	hip.Runtime
	name string
}

func (f fakeRT) Name() string              { return f.name }
func (f fakeRT) DeviceCount() (int, error) { return 1, nil }

// stubOpeners replaces the GPU openers and counts host opens.
func stubOpeners(t *testing.T, nv, amdErr error) *int {
	oldNV, oldAMD, oldHost := openNVIDIA, openAMD, openHost
	t.Cleanup(func() { openNVIDIA, openAMD, openHost = oldNV, oldAMD, oldHost })
	openNVIDIA = func() (hip.Runtime, error) {
		if nv != nil {
			return nil, nv
		}
		return fakeRT{name: NVIDIA}, nil
	}
	openAMD = func() (hip.Runtime, error) {
		if amdErr != nil {
			return nil, amdErr
		}
		return fakeRT{name: AMD}, nil
	}
	hostOpens := new(int)
	openHost = func() (hip.Runtime, error) {
		*hostOpens++
		return fakeRT{name: Host}, nil
	}
	return hostOpens
}

func TestUnknownValue(t *testing.T) {
	for _, v := range []string{"cuda", "rocm", "gpu", "nvidia,amd"} {
		_, err := OpenNamed(v)
		require.Error(t, err, v)
		require.Contains(t, err.Error(), fmt.Sprintf("CECOLL_BACKEND=%q", v))
		require.Contains(t, err.Error(), "auto, nvidia, amd, host")
	}
}

func TestForcedAMDWithoutLibrary(t *testing.T) {
	if _, err := amd.Open(); err == nil {
		t.Skip("an AMD runtime is installed here")
	}
	rt, err := OpenNamed("amd")
	require.Nil(t, rt)
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "CECOLL_BACKEND=amd: libamdhip64.so.7: "), err.Error())
	require.Contains(t, err.Error(), "libamdhip64.so.6")
}

func TestForcedNVIDIAWithoutLibrary(t *testing.T) {
	if _, err := nvidia.Open(); err == nil {
		t.Skip("a CUDA driver is installed here")
	}
	rt, err := OpenNamed("nvidia")
	require.Nil(t, rt)
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "CECOLL_BACKEND=nvidia: "), err.Error())
	require.Contains(t, err.Error(), "libcuda.so.1")
}

func TestForcedNeverFallsBack(t *testing.T) {
	hostOpens := stubOpeners(t, errors.New("libcuda.so.1: not found"), errors.New("libamdhip64.so.7: not found"))
	for _, name := range []string{NVIDIA, AMD} {
		_, err := OpenNamed(name)
		require.Error(t, err)
		require.Contains(t, err.Error(), "CECOLL_BACKEND="+name+": ")
	}
	require.Zero(t, *hostOpens, "a forced GPU backend never falls back to host")
}

func TestForcedHost(t *testing.T) {
	t.Setenv("CECOLL_HOST_DEVICES", "2")
	logs := captureLog(t)
	for _, v := range []string{"host", " HOST "} {
		rt, err := OpenNamed(v)
		require.NoError(t, err)
		closeHost(t, rt)
		require.Equal(t, "host", rt.Name())
		n, err := rt.DeviceCount()
		require.NoError(t, err)
		require.Equal(t, 2, n)
	}
	require.Contains(t, (*logs)[0], "device backend: host (CECOLL_BACKEND=host)")
}

func TestForcedHostBadConfig(t *testing.T) {
	t.Setenv("CECOLL_HOST_DEVICES", "many")
	_, err := OpenNamed("host")
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "CECOLL_BACKEND=host: CECOLL_HOST_DEVICES"), err.Error())
}

func TestAutoOnMachineWithoutGPU(t *testing.T) {
	if _, err := nvidia.Open(); err == nil {
		t.Skip("a CUDA driver is installed here")
	}
	if _, err := amd.Open(); err == nil {
		t.Skip("an AMD runtime is installed here")
	}
	logs := captureLog(t)
	for _, v := range []string{"", "auto", "AUTO"} {
		rt, err := OpenNamed(v)
		require.NoError(t, err, v)
		closeHost(t, rt)
		require.Equal(t, "host", rt.Name())
	}
	require.Contains(t, (*logs)[0], "device backend: host (auto: no GPU backend: nvidia: ")
	require.Contains(t, (*logs)[0], "; amd: ")
}

func TestAutoOrder(t *testing.T) {
	fail := errors.New("not here")
	for _, tc := range []struct {
		nv, amd error
		want    string
	}{
		{nil, nil, NVIDIA},
		{fail, nil, AMD},
		{fail, fail, Host},
	} {
		t.Run(tc.want, func(t *testing.T) {
			stubOpeners(t, tc.nv, tc.amd)
			logs := captureLog(t)
			rt, err := OpenNamed(Auto)
			require.NoError(t, err)
			require.Equal(t, tc.want, rt.Name())
			require.Len(t, *logs, 1)
			require.Contains(t, (*logs)[0], "device backend: "+tc.want+" (auto")
		})
	}
}

// resetOpen gives the test a fresh process-wide choice.
func resetOpen(t *testing.T) {
	old := open
	open = sync.OnceValues(openFromEnv)
	t.Cleanup(func() { open = old })
}

func TestOpenCachesRuntime(t *testing.T) {
	resetOpen(t)
	t.Setenv("CECOLL_HOST_DEVICES", "2")
	t.Setenv("CECOLL_BACKEND", "host")
	var wg sync.WaitGroup
	got := make([]hip.Runtime, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt, err := Open()
			if err == nil {
				got[i] = rt
			}
		}()
	}
	wg.Wait()
	require.NotNil(t, got[0])
	closeHost(t, got[0])
	for _, rt := range got {
		require.True(t, rt == got[0], "every caller gets the same runtime")
	}
	t.Setenv("CECOLL_BACKEND", "bogus")
	rt, err := Open()
	require.NoError(t, err, "the first choice stands")
	require.True(t, rt == got[0])
}

func TestOpenCachesError(t *testing.T) {
	resetOpen(t)
	t.Setenv("CECOLL_BACKEND", "bogus")
	_, err1 := Open()
	require.Error(t, err1)
	t.Setenv("CECOLL_BACKEND", "host")
	rt, err2 := Open()
	require.Nil(t, rt)
	require.Equal(t, err1, err2)
}
