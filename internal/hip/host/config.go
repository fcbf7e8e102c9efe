package host

import (
	"fmt"

	"cecoll/internal/hip"
	"cecoll/internal/param"
)

// DefaultDevices is the number of virtual devices when CECOLL_HOST_DEVICES
// is unset (param.HostDevices' default; config_test.go checks they agree).
const DefaultDevices = 8

// Config configures a host Runtime.
type Config struct {
	// Devices is the number of virtual devices (0: DefaultDevices).
	Devices int
	// Chaos seeds the adversarial scheduler; 0 turns it off.
	Chaos int64
	// NoInline leaves every op to the stream workers: enqueueing threads
	// never run ready ops themselves (inline.go). Chaos implies it.
	NoInline bool
	// Caps are the capabilities the device reports and enforces; nil means
	// DefaultCaps (everything on, CUDA-like batches).
	Caps *hip.Caps
	// Queues is each device's hardware queue count (Caps.StreamQueues,
	// CECOLL_HOST_QUEUES; 0: no limit): a stream with ops pending holds
	// one, and once all are held no other stream of the device runs, as on
	// a GPU (queues.go). Inline execution is off with a limit.
	Queues int
}

// DefaultCaps has every capability on and CUDA's in-order memop batches.
func DefaultCaps() hip.Caps {
	return hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: true, Multicast: true}
}

// capSwitches are the words of CECOLL_HOST_CAPS and what each does to Caps.
var capSwitches = map[string]func(*hip.Caps){
	"nobatchcopy": func(c *hip.Caps) { c.BatchCopy = false },
	"noattrs":     func(c *hip.Caps) { c.CopyAttributes = false },
	"nopeerwrite": func(c *hip.Caps) { c.PeerWriteValue = false },
	"nomulticast": func(c *hip.Caps) { c.Multicast = false },
	"hipbatches":  func(c *hip.Caps) { c.SplitWaitReset = true },
}

// ParseCaps applies a comma-separated CECOLL_HOST_CAPS list to DefaultCaps.
// An unknown switch is an error naming it.
func ParseCaps(list string) (hip.Caps, error) {
	words, err := param.HostCaps.Parse(list)
	if err != nil {
		return DefaultCaps(), err
	}
	return applySwitches(words)
}

// applySwitches applies words of CECOLL_HOST_CAPS to DefaultCaps.
func applySwitches(words []string) (hip.Caps, error) {
	c := DefaultCaps()
	for _, w := range words {
		f, ok := capSwitches[w]
		if !ok {
			return c, fmt.Errorf("%s: switch %q has no effect in this package", param.HostCaps.Name(), w)
		}
		f(&c)
	}
	return c, nil
}

// ConfigFromEnv reads CECOLL_HOST_DEVICES (default 8), CECOLL_HOST_CHAOS
// (an int64 seed; unset or 0: off), CECOLL_HOST_INLINE (0 or 1, default 1;
// 0 sets NoInline), CECOLL_HOST_QUEUES (default 0) and CECOLL_HOST_CAPS. A
// bad value is an error naming the variable: a test run on another device
// than the one asked for would prove nothing.
func ConfigFromEnv() (Config, error) {
	cfg := Config{Devices: DefaultDevices}
	for _, err := range []error{param.HostDevices.Err(), param.HostChaos.Err(), param.HostInline.Err(), param.HostQueues.Err(), param.HostCaps.Err()} {
		if err != nil {
			return cfg, err
		}
	}
	cfg.Devices = param.HostDevices.Get()
	cfg.Chaos = param.HostChaos.Get()
	cfg.NoInline = !param.HostInline.Get()
	cfg.Queues = param.HostQueues.Get()
	caps, err := applySwitches(param.HostCaps.Get())
	if err != nil {
		return cfg, err
	}
	cfg.Caps = &caps
	return cfg, nil
}
