package host

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"cecoll/internal/hip"
)

// DefaultDevices is the number of virtual devices when CECOLL_HOST_DEVICES
// is unset.
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
	c := DefaultCaps()
	for _, w := range strings.Split(list, ",") {
		w = strings.ToLower(strings.TrimSpace(w))
		if w == "" {
			continue
		}
		f, ok := capSwitches[w]
		if !ok {
			return c, fmt.Errorf("CECOLL_HOST_CAPS: unknown switch %q (known: nobatchcopy, noattrs, nopeerwrite, nomulticast, hipbatches)", w)
		}
		f(&c)
	}
	return c, nil
}

// ConfigFromEnv reads CECOLL_HOST_DEVICES (default 8), CECOLL_HOST_CHAOS
// (an int64 seed; unset or 0: off), CECOLL_HOST_INLINE (a boolean, default
// on; 0 sets NoInline) and CECOLL_HOST_CAPS.
func ConfigFromEnv() (Config, error) {
	cfg := Config{Devices: DefaultDevices}
	if v := strings.TrimSpace(os.Getenv("CECOLL_HOST_DEVICES")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return cfg, fmt.Errorf("CECOLL_HOST_DEVICES=%q: want a positive integer", v)
		}
		cfg.Devices = n
	}
	if v := strings.TrimSpace(os.Getenv("CECOLL_HOST_CHAOS")); v != "" {
		n, err := strconv.ParseInt(v, 0, 64)
		if err != nil {
			return cfg, fmt.Errorf("CECOLL_HOST_CHAOS=%q: want an int64 seed", v)
		}
		cfg.Chaos = n
	}
	if v := strings.TrimSpace(os.Getenv("CECOLL_HOST_INLINE")); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("CECOLL_HOST_INLINE=%q: want 0 or 1", v)
		}
		cfg.NoInline = !on
	}
	caps, err := ParseCaps(os.Getenv("CECOLL_HOST_CAPS"))
	if err != nil {
		return cfg, err
	}
	cfg.Caps = &caps
	return cfg, nil
}
