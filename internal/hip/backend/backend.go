package backend

import (
	"fmt"
	"strings"
	"sync"

	"cecoll/internal/hip"
	"cecoll/internal/hip/amd"
	"cecoll/internal/hip/host"
	"cecoll/internal/hip/nvidia"
	"cecoll/internal/param"
)

// Accepted values of CECOLL_BACKEND (param.Backend; blank means Auto).
const (
	Auto   = "auto"
	NVIDIA = "nvidia"
	AMD    = "amd"
	Host   = "host"
)

// Logf receives INFO messages: which backend was chosen and why. The
// layers above set it to their logger before the first Open; by default
// nothing is printed.
var Logf = func(format string, args ...any) {}

// openers are the backend constructors, variables so that tests can
// replace a GPU backend with one that fails or succeeds on demand.
var (
	openNVIDIA = func() (hip.Runtime, error) { return nonNil(nvidia.Open()) }
	openAMD    = func() (hip.Runtime, error) { return nonNil(amd.Open()) }
	openHost   = func() (hip.Runtime, error) {
		cfg, err := host.ConfigFromEnv()
		if err != nil {
			return nil, err
		}
		return nonNil(host.New(cfg))
	}
)

// nonNil converts a backend's (*T, error) to (hip.Runtime, error) without
// turning a nil *T into a non-nil interface.
func nonNil[T hip.Runtime](rt T, err error) (hip.Runtime, error) {
	if err != nil {
		return nil, err
	}
	return rt, nil
}

var open = sync.OnceValues(openFromEnv)

// openFromEnv opens the backend CECOLL_BACKEND names. A bad value is an
// error, never the default: auto could pick another backend than the one
// the user meant.
func openFromEnv() (hip.Runtime, error) {
	if err := param.Backend.Err(); err != nil {
		return nil, err
	}
	return OpenNamed(param.Backend.Get())
}

// Open returns the process's runtime, chosen on the first call from
// CECOLL_BACKEND; later calls return the same runtime, or the same error.
func Open() (hip.Runtime, error) { return open() }

// OpenNamed opens the backend name ("auto", "nvidia", "amd", "host"; ""
// means auto) without caching. A named GPU backend that cannot load is an
// error, never a silent fallback to another backend.
func OpenNamed(name string) (hip.Runtime, error) {
	v, err := param.Backend.Parse(name)
	if err != nil {
		return nil, err
	}
	if v == Auto {
		return openAuto()
	}
	rt, err := openerFor(v)()
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", param.Backend.Name(), v, err)
	}
	Logf("device backend: %s (%s=%s)", rt.Name(), param.Backend.Name(), v)
	return rt, nil
}

func openerFor(name string) func() (hip.Runtime, error) {
	switch name {
	case NVIDIA:
		return openNVIDIA
	case AMD:
		return openAMD
	default:
		return openHost
	}
}

// openAuto takes the first GPU backend that loads and sees a device, else
// the host device, and logs why the others were passed over.
func openAuto() (hip.Runtime, error) {
	var skipped []string
	for _, name := range []string{NVIDIA, AMD} {
		rt, err := openerFor(name)()
		if err == nil {
			n, _ := rt.DeviceCount()
			Logf("device backend: %s (auto: library loaded, %d device(s))", name, n)
			return rt, nil
		}
		skipped = append(skipped, fmt.Sprintf("%s: %v", name, err))
	}
	rt, err := openHost()
	if err != nil {
		return nil, fmt.Errorf("%s=auto: no GPU backend (%s); host: %w",
			param.Backend.Name(), strings.Join(skipped, "; "), err)
	}
	Logf("device backend: host (auto: no GPU backend: %s)", strings.Join(skipped, "; "))
	return rt, nil
}
