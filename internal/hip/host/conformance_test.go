package host_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"cecoll/internal/hip"
	"cecoll/internal/hip/hiptest"
	"cecoll/internal/hip/host"
)

// TestMain lets the conformance suite re-execute this binary as the child
// of its cross-process tests. The child's runtime takes its config from the
// environment, which the parent sets to its own (hiptest.Options.ChildEnv).
func TestMain(m *testing.M) {
	hiptest.RunChildIfRequested(func() (hip.Runtime, error) {
		cfg, err := host.ConfigFromEnv()
		if err != nil {
			return nil, err
		}
		return host.New(cfg)
	})
	os.Exit(m.Run())
}

// capSwitches are the CECOLL_HOST_CAPS words the host device offers; each
// gets a run of its own, and one run has them all.
var capSwitches = []string{"nobatchcopy", "noattrs", "nopeerwrite", "nomulticast", "hipbatches"}

// conformanceRun is one configuration the suite runs on.
type conformanceRun struct {
	name  string
	chaos int64
	caps  string // CECOLL_HOST_CAPS words
	devs  int
	dev   int
	xproc bool
	// noInline: the stream workers run every op (CECOLL_HOST_INLINE=0).
	noInline bool
}

func inlineEnv(off bool) string {
	if off {
		return "0"
	}
	return "1"
}

// TestConformance runs the device-runtime conformance suite on the host
// device: with the default config, under the adversarial scheduler with a
// few fixed seeds, with one device and on a device other than 0, and with
// each capability switched off, so that the suite is seen to adapt through
// Caps. Cross-process children get the parent's config.
func TestConformance(t *testing.T) {
	runs := []conformanceRun{
		{name: "default", xproc: true},
		{name: "worker-only", xproc: true, noInline: true},
		{name: "one-device", devs: 1},
		{name: "device-3", devs: 4, dev: 3},
	}
	for _, seed := range []int64{1, 7, 42} {
		runs = append(runs, conformanceRun{name: "chaos-" + strconv.FormatInt(seed, 10), chaos: seed, xproc: seed == 7})
	}
	for _, sw := range capSwitches {
		runs = append(runs, conformanceRun{name: "caps-" + sw, caps: sw, xproc: true})
	}
	runs = append(runs,
		conformanceRun{name: "caps-all-off", caps: strings.Join(capSwitches, ","), xproc: true},
		// The fallbacks meet reordering too.
		conformanceRun{name: "caps-noattrs-hipbatches-chaos-3", caps: "noattrs,hipbatches", chaos: 3})

	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			caps, err := host.ParseCaps(r.caps)
			require.NoError(t, err)
			rt, err := host.New(host.Config{Devices: r.devs, Chaos: r.chaos, Caps: &caps, NoInline: r.noInline})
			require.NoError(t, err)
			t.Cleanup(rt.Close)
			hiptest.Run(t, rt, hiptest.Options{
				CrossProcess: r.xproc,
				Timeout:      30 * time.Second,
				Device:       r.dev,
				ChildEnv: []string{
					"CECOLL_HOST_CAPS=" + r.caps,
					"CECOLL_HOST_CHAOS=" + strconv.FormatInt(r.chaos, 10),
					"CECOLL_HOST_INLINE=" + inlineEnv(r.noInline),
					"CECOLL_HOST_DEVICES=" + strconv.Itoa(max(r.devs, r.dev+1, host.DefaultDevices)),
				},
			})
		})
	}
}
