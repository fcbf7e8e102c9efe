package comm

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cecoll/internal/bootstrap"
	"cecoll/internal/ce"
	"cecoll/internal/forward"
	"cecoll/internal/hip"
	"cecoll/internal/log"
	"cecoll/internal/result"
)

// Forward mode. With a real NCCL or RCCL loaded (forward.Current), a
// cecoll communicator owns a real one, created from the same init:
// ncclCommInitRank's rank 0 makes the real unique id and passes it over
// cecoll's bootstrap (pairByID); ncclCommInitAll, Split and Shrink make the
// real communicators themselves and hand them in (pairGiven). Whether
// every rank got its real communicator is agreed over the bootstrap: where
// the real library refused on any rank (several ranks on one GPU), every
// rank aborts its own and the communicator stays CE-only, with the reason.
// The routing policy and the real library's identity are agreed at init
// too (initCollective), so every rank routes every call alike.

type pairMode uint8

const (
	pairNone  pairMode = iota // no real library
	pairByID                  // rank 0 makes the real unique id
	pairGiven                 // the caller made the real communicator (given, givenErr)
)

// pairArgs is how a new communicator pairs (initRank).
type pairArgs struct {
	lib      forward.Lib
	mode     pairMode
	given    forward.Handle
	givenErr error
}

// pairing is a communicator's forward-mode state.
type pairing struct {
	lib      forward.Lib
	mode     pairMode
	given    forward.Handle // pairGiven: the real communicator made for this rank
	givenErr error          // pairGiven: why there is none
	realRef                 // the real communicator it owns
	realWhy  string         // with lib and no real communicator: why (set at init)
	policy   forward.Policy // agreed at init
	spans    bool           // its ranks are on several hosts: everything is forwarded
	noCE     string         // copy engines cannot run safely on some rank (ceBlocked): everything is forwarded
	tally    forward.Tally  // where its calls went, for the INFO summary (Summary)
}

// realRef is a real library's handle that a cecoll communicator or window
// owns, and the C handle's copy of it (export's stubs read that one), kept
// equal.
type realRef struct {
	h      atomic.Uintptr
	slotMu sync.Mutex
	slot   *uintptr
}

// Real is the real handle (0: none).
func (r *realRef) Real() uintptr { return r.h.Load() }

// BindRealSlot keeps *p equal to the real handle from now on (nil: stop);
// export passes the field its stubs read.
func (r *realRef) BindRealSlot(p *uintptr) {
	r.slotMu.Lock()
	defer r.slotMu.Unlock()
	r.slot = p
	if p != nil {
		atomic.StoreUintptr(p, r.h.Load())
	}
}

func (r *realRef) setReal(h forward.Handle) {
	r.slotMu.Lock()
	defer r.slotMu.Unlock()
	r.h.Store(uintptr(h))
	if r.slot != nil {
		atomic.StoreUintptr(r.slot, uintptr(h))
	}
}

// takeReal clears and returns the real handle (a communicator's Finalize
// keeps it; Destroy and Abort take it).
func (r *realRef) takeReal() forward.Handle {
	r.slotMu.Lock()
	defer r.slotMu.Unlock()
	h := r.h.Swap(0)
	if r.slot != nil {
		atomic.StoreUintptr(r.slot, 0)
	}
	return forward.Handle(h)
}

// Lib is the real library c forwards to, nil when none.
func (c *Comm) Lib() forward.Lib { return c.lib }

// Spans reports whether c's ranks are on several hosts.
func (c *Comm) Spans() bool { return c.spans }

// initInfo is what each rank sends at init.
type initInfo struct {
	dev, pid uint64
	host     string
	policy   []byte
	lib      string
	// engine is the engine's settings (ce.Config.Agreed), a NAME=VALUE
	// line each: every rank must run with the same.
	engine string
	// queues and memops: the rank's runtime's Caps.StreamQueues (0: no
	// limit) and Caps.StreamMemOps, which say whether copy engines can
	// run there (ceBlocked).
	queues uint64
	memops bool
	check  bool   // CECOLL_CHECK: every rank of a node communicator must agree
	realID []byte // rank 0, pairByID: the real unique id
	idErr  string // rank 0, pairByID: why there is none
}

func (m *initInfo) encode() []byte {
	var e bootstrap.Enc
	e.U64(m.dev)
	e.U64(m.pid)
	e.Str(m.host)
	e.Bytes(m.policy)
	e.Str(m.lib)
	e.Str(m.engine)
	e.U64(m.queues)
	e.U32(flag(m.memops))
	e.U32(flag(m.check))
	e.Bytes(m.realID)
	e.Str(m.idErr)
	return e.B
}

func decodeInit(p []byte) (initInfo, error) {
	d := bootstrap.Dec{B: p}
	m := initInfo{dev: d.U64(), pid: d.U64(), host: d.StrMax(bootstrap.MaxHost, "host name"), policy: d.Bytes(),
		lib: d.StrMax(bootstrap.MaxText, "library name"), engine: d.StrMax(bootstrap.MaxText, "engine settings"), queues: d.U64()}
	m.memops, m.check = d.U32() == 1, d.U32() == 1
	m.realID, m.idErr = d.Bytes(), d.StrMax(bootstrap.MaxText, "failure text")
	m.host, m.lib, m.engine, m.idErr = bootstrap.Clean(m.host), bootstrap.Clean(m.lib), bootstrap.CleanLines(m.engine), bootstrap.Clean(m.idErr)
	return m, d.End()
}

func flag(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// engineText is cfg's agreed settings as initInfo.engine carries them.
func engineText(cfg ce.Config, caps hip.Caps) string {
	var b strings.Builder
	for _, st := range cfg.Agreed(caps) {
		fmt.Fprintf(&b, "%s=%s\n", st.Name, st.Value)
	}
	return b.String()
}

// engineDiff is the first setting in which rank r's engine text differs
// from rank 0's: its name and the two values.
func engineDiff(r0, r string) (name, v0, v string) {
	values := func(s string) map[string]string {
		m := map[string]string{}
		for _, l := range strings.Split(s, "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				m[k] = v
			}
		}
		return m
	}
	m0, m := values(r0), values(r)
	for _, l := range strings.Split(r0+r, "\n") {
		if k, _, ok := strings.Cut(l, "="); ok && m0[k] != m[k] {
			return k, m0[k], m[k]
		}
	}
	return "the engine settings", r0, r // a malformed text
}

// exchangeInit sends this rank's initInfo and checks what every rank must
// agree on: the real library and, with one, the routing policy. A
// mismatch is an error on every rank here, never a divergence later.
func (c *Comm) exchangeInit() ([]initInfo, error) {
	c.policy = forward.PolicyFromEnv(c.cfg.CTAPolicy, c.cfg.CTASet)
	c.engCfg = engineConfig(c)
	caps := c.rt.Caps()
	mine := initInfo{dev: uint64(c.dev), pid: uint64(os.Getpid()), host: c.cfg.Host, policy: c.policy.Encode(),
		engine: engineText(c.engCfg, caps), queues: uint64(max(caps.StreamQueues, 0)), memops: caps.StreamMemOps,
		check: c.node != nil && checkEnabled()}
	if mine.host == "" {
		mine.host = bootstrap.Hostname()
	}
	if c.lib != nil {
		mine.lib = fmt.Sprintf("%s (version %d)", c.lib.Name(), c.lib.Version())
	}
	if c.mode == pairByID && c.rank == 0 {
		var id [forward.IDBytes]byte
		if err := c.lib.GetUniqueID(&id); err != nil {
			mine.idErr = err.Error()
		} else {
			mine.realID = id[:]
		}
	}
	if err := c.checkStart(); err != nil {
		return nil, err
	}
	raw, err := c.boot.AllGather(mine.encode())
	if err != nil {
		return nil, err
	}
	all := make([]initInfo, len(raw))
	for r, p := range raw {
		if all[r], err = decodeInit(p); err != nil {
			return nil, result.Errorf(result.InternalError, "init: rank %d sent a malformed exchange: %v", r, err)
		}
	}
	for r := 1; r < len(all); r++ {
		// Without a real library every call takes the copy engines: the
		// policy routes nothing then, and need not agree.
		if all[0].lib != "" && string(all[r].policy) != string(all[0].policy) {
			return nil, result.Errorf(result.InvalidUsage,
				"ranks disagree on routing: rank 0 has %s, rank %d %s; set CECOLL_ROUTE, CECOLL_ROUTE_BYTES, NCCL_CTA_POLICY and the config's CTAPolicy alike on every rank",
				policyText(all[0].policy), r, policyText(all[r].policy))
		}
		if all[r].lib != all[0].lib {
			return nil, result.Errorf(result.InvalidUsage, "ranks disagree on the real library: rank 0 has %s, rank %d %s",
				libText(all[0].lib), r, libText(all[r].lib))
		}
		if all[r].check != all[0].check {
			return nil, result.Errorf(result.InvalidUsage, "ranks disagree on CECOLL_CHECK: rank 0 has %d, rank %d has %d; set it alike in every process",
				flag(all[0].check), r, flag(all[r].check))
		}
	}
	if err := c.checkJoin(); err != nil {
		return nil, err
	}
	for r := range all {
		if all[r].host != all[0].host {
			c.spans = true
		}
	}
	return all, nil
}

// engineConfig is the engine configuration a rank runs with: its
// process's environment (a variable for tests, which give ranks of one
// process different ones).
var engineConfig = func(*Comm) ce.Config { return ce.ConfigFromEnv() }

// agreeEngine refuses a communicator whose ranks' engine settings differ
// (ce.Config.Agreed): on every rank alike, since each compares the same
// table, and before any engine exists.
func agreeEngine(all []initInfo) error {
	for r := 1; r < len(all); r++ {
		if all[r].engine != all[0].engine {
			name, v0, v := engineDiff(all[0].engine, all[r].engine)
			return result.Errorf(result.InvalidUsage,
				"ranks disagree on %s: rank 0 has %s, rank %d has %s; it decides the copy engines' plans and syncs, so every rank must run with the same value (set it alike in every process, or in none)",
				name, v0, r, v)
		}
	}
	return nil
}

func policyText(b []byte) string {
	if len(b) != 10 {
		return "an unknown policy"
	}
	p := forward.Policy{Route: forward.Route(b[0]), Bytes: binary.LittleEndian.Uint64(b[1:]), ZeroCTA: b[9] == 1}
	return p.String()
}

func libText(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// pairUp gives c its real communicator, collectively (every rank calls it
// once at init, after the engine). root is rank 0's initInfo.
func (c *Comm) pairUp(root initInfo) error {
	var h forward.Handle
	var rerr error
	switch c.mode {
	case pairByID:
		if len(root.realID) != forward.IDBytes {
			rerr = fmt.Errorf("rank 0 could not make the real unique id: %s", root.idErr)
			break
		}
		h, rerr = c.lib.InitRank(c.size, (*[forward.IDBytes]byte)(root.realID), c.rank, c.cfg.Raw)
	case pairGiven:
		h, rerr, c.given = c.given, c.givenErr, 0
	}
	if rerr == nil && h != 0 {
		rerr = c.waitReal(h)
	}
	if rerr == nil && h == 0 {
		rerr = fmt.Errorf("it gave no communicator")
	}
	bad, text, err := c.agree(rerr)
	if err != nil {
		c.dropReal(h)
		return err
	}
	if bad >= 0 {
		c.dropReal(h)
		c.realWhy = fmt.Sprintf("the real library (%s) refused this communicator on rank %d: %s", c.lib.Name(), bad, text)
		if c.spans {
			return result.Errorf(result.InvalidUsage, "%s; its ranks are on several hosts, which copy engines do not reach", c.realWhy)
		}
		if c.rank == 0 {
			log.Warnf("comm %#x: %s; it runs %s on copy engines and refuses what it would forward", c.w.key, c.realWhy, ce.Provided())
		}
		return nil
	}
	c.setReal(h)
	log.Infof(log.Init, "comm %#x rank %d paired with %s communicator %#x (%v, spans hosts: %v)", c.w.key, c.rank, c.lib.Name(), uintptr(h), c.policy, c.spans)
	return nil
}

// agree tells every rank whether the real library did its part here
// (local: its error, nil when it did) and returns the first rank where it
// did not (-1: none) with that rank's error text: every rank then acts
// alike.
func (c *Comm) agree(local error) (bad int, text string, err error) {
	var e bootstrap.Enc
	if local == nil {
		e.U32(1)
		e.Str("")
	} else {
		e.U32(0)
		e.Str(local.Error())
	}
	all, err := c.boot.AllGather(e.B)
	if err != nil {
		return -1, "", err
	}
	for r, p := range all {
		d := bootstrap.Dec{B: p}
		if ok, text := d.U32(), d.StrMax(bootstrap.MaxText, "failure text"); d.End() != nil || ok != 1 {
			return r, bootstrap.Clean(text), nil
		}
	}
	return -1, "", nil
}

// dropReal aborts a real communicator that will not be paired.
func (c *Comm) dropReal(h forward.Handle) {
	if h != 0 {
		if err := c.lib.Abort(h); err != nil {
			log.Warnf("rank %d: aborting the unpaired real communicator: %v", c.rank, err)
		}
	}
}

// waitReal waits for a real communicator made non-blocking
// (config.blocking = 0) to finish its init: cecoll completes a
// communicator before it returns, and the pairing is agreed at init.
func (c *Comm) waitReal(h forward.Handle) error {
	deadline := time.Now().Add(bootstrap.Timeout())
	for {
		err := c.lib.AsyncError(h)
		if err == nil || result.Of(err) != result.InProgress {
			return err
		}
		if time.Now().After(deadline) {
			return result.Errorf(result.RemoteError, "the real communicator was still initialising after %v", bootstrap.Timeout())
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// ForwardRefusal is the error of a call c would forward but cannot: it owns
// no real communicator. why is what cecoll would say without a real library.
func (c *Comm) ForwardRefusal(call, why string) error {
	switch {
	case c.state() == stInit:
		return result.Errorf(result.InvalidUsage, "%s: the communicator is still being created (its ncclGroupEnd has not run)", call)
	case c.lib == nil:
		return result.Errorf(result.InvalidUsage, "%s: %s; no real NCCL or RCCL is loaded to forward it to (CECOLL_NCCL_LIB)", call, why)
	case c.realWhy != "":
		return result.Errorf(result.InvalidUsage, "%s: %s, and this communicator has no real one to forward it to: %s", call, why, c.realWhy)
	}
	return c.usable(call)
}

// RouteCE decides where a collective or a send or receive goes: true for the copy
// engines, false for the real communicator c owns. It reads only what every
// rank agreed on (the policy, the pairing, the windows) and the call's
// arguments (cta: its ncclCollConfig_t's CTA policy, -1 if none), so every
// rank decides alike, and it allocates nothing.
func (c *Comm) RouteCE(fn Func, send, recv hip.DevicePtr, count uintptr, dt int32, cta int) bool {
	if c.state() != stReady {
		return true // cecoll's own refusal
	}
	elt := ce.TypeSize(dt)
	bytes := uint64(count) * uint64(elt)
	if c.lib == nil {
		c.tally.Add(int(fn), bytes, true) // CE only
		return true
	}
	if c.Real() == 0 {
		return c.routed(fn, bytes, true, forward.WhyNoReal)
	}
	if c.spans {
		return c.routed(fn, bytes, false, forward.WhyNodes)
	}
	if c.noCE != "" {
		return c.routed(fn, bytes, false, forward.WhyNoCE)
	}
	// The deciding buffer of its row (ce op.go): the one every rank passes
	// at the same offset of a window, or none does. A send and its receive
	// have none: the two sides' buffers differ, and only their bytes agree.
	inWin := false
	if o := ce.OpOf(fn); o.Arg != ce.ArgPeer {
		a := ce.Args{Func: fn, Count: count, EltSize: elt, Send: send, Recv: recv}
		buf, size := o.Deciding(&a, c.size)
		_, inWin = c.FindWindow(buf, size)
	}
	way, why := c.policy.CE(forward.Call{Bytes: bytes, InWindow: inWin && elt != 0, ZeroCTA: cta >= 0 && cta&forward.CTAPolicyZero != 0})
	return c.routed(fn, bytes, way, why)
}

// routed logs (once per kind) and counts where a call went; it returns ce.
func (c *Comm) routed(fn Func, bytes uint64, ce bool, why forward.Why) bool {
	forward.Note(int(fn), fn.String(), bytes, ce, why)
	c.tally.Add(int(fn), bytes, ce)
	return ce
}

// Summary is the INFO line of c's end: where its calls went, with stubs,
// the calls its C handle's stubs forwarded.
func (c *Comm) Summary(stubs []forward.StubCalls) string {
	return forward.Summary(fmt.Sprintf("comm %#x rank %d/%d", c.w.key, c.rank, c.size), &c.tally, func(fn int) string { return Func(fn).String() }, stubs, c.policy)
}

// groupReal opens or closes the real library's group with cecoll's, on the
// calling thread.
func groupReal(start bool) error {
	lib, _ := forward.Current()
	if lib == nil {
		return nil
	}
	if start {
		return lib.GroupStart()
	}
	return lib.GroupEnd()
}

// currentLib is the process's real library for a new communicator, or
// the error that made loading it fail.
func currentLib() (forward.Lib, pairMode, error) {
	lib, err := forward.Current()
	if err != nil {
		return nil, pairNone, err
	}
	if lib == nil {
		return nil, pairNone, nil
	}
	return lib, pairByID, nil
}
