package host

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/param"
)

func TestConfigFromEnv(t *testing.T) {
	tests := []struct {
		name, devices, chaos, caps string
		inline                     string
		want                       Config
		wantErr                    string
	}{
		{name: "defaults", want: Config{Devices: 8, Caps: capsWith(func(*hip.Caps) {})}},
		{name: "all switches", devices: "3", chaos: "42", caps: "nobatchcopy, noattrs,nopeerwrite,nomulticast,hipbatches",
			want: Config{Devices: 3, Chaos: 42, Caps: &hip.Caps{SplitWaitReset: true}}},
		{name: "one switch", caps: "noattrs", want: Config{Devices: 8, Caps: capsWith(func(c *hip.Caps) { c.CopyAttributes = false })}},
		{name: "unknown switch", caps: "noattrs,warp", wantErr: `"warp"`},
		{name: "bad devices", devices: "0", wantErr: "CECOLL_HOST_DEVICES"},
		{name: "bad seed", chaos: "x", wantErr: "CECOLL_HOST_CHAOS"},
		{name: "inline off", inline: "0", want: Config{Devices: 8, NoInline: true, Caps: capsWith(func(*hip.Caps) {})}},
		{name: "inline on", inline: "1", want: Config{Devices: 8, Caps: capsWith(func(*hip.Caps) {})}},
		{name: "bad inline", inline: "maybe", wantErr: "CECOLL_HOST_INLINE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CECOLL_HOST_DEVICES", tc.devices)
			t.Setenv("CECOLL_HOST_CHAOS", tc.chaos)
			t.Setenv("CECOLL_HOST_CAPS", tc.caps)
			t.Setenv("CECOLL_HOST_INLINE", tc.inline)
			cfg, err := ConfigFromEnv()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg)
		})
	}
}

// The registry's declaration and this package agree.
func TestConfigMatchesParam(t *testing.T) {
	require.Equal(t, DefaultDevices, param.HostDevices.Default())
	require.ElementsMatch(t, param.HostCaps.Info().Choices, slices.Collect(maps.Keys(capSwitches)))
}

func TestDevices(t *testing.T) {
	rt := newRT(t, Config{Devices: 3})
	require.Equal(t, "host", rt.Name())
	v, err := rt.DriverVersion()
	require.NoError(t, err)
	require.Equal(t, 13000, v)
	n, err := rt.DeviceCount()
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, hip.ErrInvalidDevice, rt.SetDevice(3))
	require.Equal(t, hip.ErrInvalidDevice, rt.SetDevice(-1))
	ok, err := rt.DeviceCanAccessPeer(0, 2)
	require.NoError(t, err)
	require.True(t, ok)

	// The current device is per OS thread.
	lockThread()
	defer unlockThread()
	require.NoError(t, rt.SetDevice(1))
	done := make(chan int)
	go func() {
		lockThread()
		defer unlockThread()
		if err := rt.SetDevice(2); err != nil {
			done <- -1
			return
		}
		d, _ := rt.GetDevice()
		done <- d
	}()
	require.Equal(t, 2, <-done)
	d, err := rt.GetDevice()
	require.NoError(t, err)
	require.Equal(t, 1, d)
	require.NoError(t, rt.SetDevice(0))
}
