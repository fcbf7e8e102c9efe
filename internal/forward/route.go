package forward

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync/atomic"

	"cecoll/internal/log"
	"cecoll/internal/param"
)

// Route is CECOLL_ROUTE.
type Route uint8

const (
	RouteAuto Route = iota // the rule of Policy.CE
	RouteCE                // every AllGather, AlltoAll, Scatter, Gather on copy engines
	RouteNCCL              // none: the real library runs them
)

// CTAPolicyZero is NCCL_CTA_POLICY_ZERO: the communicator asks for no SMs.
const CTAPolicyZero = 0x02

// Policy is what a communicator's routing depends on beyond each call's
// arguments. Every rank must hold the same one (internal/comm agrees it at
// init).
type Policy struct {
	Route   Route
	Bytes   uint64 // CECOLL_ROUTE_BYTES: auto's size threshold, per-rank block
	ZeroCTA bool   // the communicator's CTA policy includes NCCL_CTA_POLICY_ZERO
}

// PolicyFromEnv is the policy of a communicator whose config set CTAPolicy
// to cta (set false: unset, NCCL_CTA_POLICY then applies).
func PolicyFromEnv(cta int, set bool) Policy {
	p := Policy{Bytes: param.RouteBytes.Get()}
	switch param.Route.Get() {
	case "ce":
		p.Route = RouteCE
	case "nccl":
		p.Route = RouteNCCL
	}
	if !set {
		cta = param.NCCLCTAPolicy.Get()
	}
	p.ZeroCTA = cta&CTAPolicyZero != 0
	return p
}

// Encode is the policy as the ranks compare it.
func (p Policy) Encode() []byte {
	b := make([]byte, 10)
	b[0] = byte(p.Route)
	binary.LittleEndian.PutUint64(b[1:], p.Bytes)
	if p.ZeroCTA {
		b[9] = 1
	}
	return b
}

func (p Policy) String() string {
	r := [...]string{"auto", "ce", "nccl"}[p.Route]
	return fmt.Sprintf("CECOLL_ROUTE=%s CECOLL_ROUTE_BYTES=%d zero-SM=%v", r, p.Bytes, p.ZeroCTA)
}

// Why says why a call went the way it did; static text.
type Why uint8

const (
	WhyNoReal    Why = iota // no real library for this communicator
	WhyNodes                // the communicator spans nodes
	WhyRouteCE              // CECOLL_ROUTE=ce
	WhyRouteNCCL            // CECOLL_ROUTE=nccl
	WhyZeroCTA              // the communicator (or the call) asked for zero SMs
	WhyWindow               // the deciding buffer is in a symmetric window
	WhyLarge                // the block is at least CECOLL_ROUTE_BYTES
	WhySmall                // below CECOLL_ROUTE_BYTES, no window, SMs allowed
	WhyNoCE                 // copy engines cannot run safely on some rank
	numWhy
)

var whyText = [numWhy]string{
	"no real library for this communicator", "the communicator spans nodes", "CECOLL_ROUTE=ce", "CECOLL_ROUTE=nccl",
	"zero-SM CTA policy", "buffer in a symmetric window", "block at least CECOLL_ROUTE_BYTES", "block below CECOLL_ROUTE_BYTES",
	"copy engines cannot run safely on some rank (see the WARN at init)",
}

func (w Why) String() string { return whyText[w] }

// Call is what one call contributes to its route.
type Call struct {
	Bytes    uint64 // the per-rank block: count x element size
	InWindow bool   // its deciding buffer lies in a symmetric window
	ZeroCTA  bool   // its ncclCollConfig_t asked for zero SMs
}

// CE decides one call of a paired communicator within one node: true for
// the copy engines. It reads only p and c, so ranks that agree on p and
// pass arguments under NCCL's contract decide alike.
func (p Policy) CE(c Call) (bool, Why) {
	switch {
	case p.Route == RouteCE:
		return true, WhyRouteCE
	case p.Route == RouteNCCL:
		return false, WhyRouteNCCL
	case p.ZeroCTA || c.ZeroCTA:
		return true, WhyZeroCTA
	case c.InWindow:
		return true, WhyWindow
	case c.Bytes >= p.Bytes:
		return true, WhyLarge
	}
	return false, WhySmall
}

// noted remembers which (collective, size class, way) was logged.
var noted [16][65][2]atomic.Bool

// Note logs at INFO, once per collective kind, size class (powers of two
// of the block) and way, where a call went and why. It allocates nothing
// once a combination was logged.
func Note(fn int, name string, bytes uint64, ce bool, why Why) {
	if fn < 0 || fn >= len(noted) {
		return
	}
	way := 0
	if ce {
		way = 1
	}
	class := bits.Len64(bytes)
	if noted[fn][class][way].Load() || !log.Enabled(log.LevelInfo, log.Coll) || noted[fn][class][way].Swap(true) {
		return
	}
	lo, hi := uint64(0), uint64(0)
	if class > 0 {
		lo, hi = 1<<(class-1), 1<<(class-1)|(1<<(class-1)-1)
	}
	dest := "the real library"
	if ce {
		dest = "copy engines"
	}
	log.Infof(log.Coll, "route: %s with %d-%d byte blocks -> %s (%s)", name, lo, hi, dest, why)
}
