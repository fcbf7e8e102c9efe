package ce

import (
	"errors"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"cecoll/internal/hip"
	"cecoll/internal/log"
	"cecoll/internal/result"
)

// Defaults of Config.
const (
	DefaultIntraBatchSyncFreq      = 8
	DefaultIntraBatchSyncThreshold = 512 << 20
	// DefaultStagingBytes is the staging window per rank: 32 MiB. Calls on
	// unregistered buffers move at most this much per receiver per round
	// (AllGather/AlltoAll: StagingBytes/n per peer block), each round costing
	// two flag syncs; 32 MiB keeps a round far longer than its syncs on
	// NVLink (about 90 us at 380 GB/s against about 10 us of syncs) while
	// costing little device memory. Zero-copy AlltoAll uses the same rounds
	// (an in-place rank stages its blocks there, B13, and must not run more
	// syncs than its peers), so an AlltoAll whose n*chunk exceeds
	// StagingBytes costs two syncs per extra round.
	DefaultStagingBytes = 32 << 20
	// DefaultHubBytes is the largest AllGather (chunk*n bytes per rank)
	// that runs as a hub round (Engine.hubRound) where it can. On one H200
	// (graph replays, N=2/4/8) a hub round was faster up to 4 MiB (at
	// N=8: 56 against 73 us) and 5% slower at 16 MiB; eager calls,
	// host-bound, were faster at every size.
	DefaultHubBytes = 4 << 20
	// hubAlltoAllBytes bounds a hub AlltoAll (chunk*n) below HubBytes:
	// its 2D copies, column by column, lose to the pushes sooner. On one
	// H200 (graph replays) a hub round was faster up to 256 KiB at 2 ranks
	// (equal there), 512 KiB at 4 and 1 MiB at 8, and 7-35% slower from 1,
	// 2 and 4 MiB.
	hubAlltoAllBytes = 256 << 10
)

// Flag-write methods (Config.FlagWrite).
const (
	FlagWriteAuto  = "auto"  // write-value where Caps().PeerWriteValue and no other rank of the process shares the device, else copy
	FlagWriteValue = "value" // stream write-value to the peer's flag
	FlagWriteCopy  = "copy"  // 4-byte device-to-device copy of a device word (B5)
)

// Sync algorithms (Config.Sync).
const (
	// SyncAuto picks per communicator: star from 4 ranks up, unless the
	// device has multicast; allpairs otherwise. Measured on one H200 with
	// copy-written flags (docs/measurements.md), 8 B AllGather graph
	// replays, us, allpairs / star: N=2 10.6 / 12.9, N=3 21.9 / 23.4,
	// N=4 35.0 / 27.9, N=8 108.9 / 50.5. The GPU runs a sync's flag
	// writes nearly one after another, so n(n-1) writes soon cost more
	// than the star's second hop.
	SyncAuto = "auto"
	// SyncAllPairs is the seed's sync: every rank writes its slot in every
	// peer's array (or once to the multicast address) and waits for all of
	// them: n(n-1) flag writes, one hop.
	SyncAllPairs = "allpairs"
	// SyncStar is a coordinator sync: every rank but rank 0 writes its slot
	// in rank 0's array; rank 0 waits for all of them and then writes its
	// slot in every peer's array: 2(n-1) flag writes, two hops.
	SyncStar = "star"
)

// Config holds the engine's tunables. Every rank of a communicator must use
// the same values (they decide the number of flag syncs of a call).
type Config struct {
	IntraBatchSyncFreq      int     // CECOLL_INTRA_BATCH_SYNC_FREQ, copies (default 8)
	IntraBatchSyncThreshold uint64  // CECOLL_INTRA_BATCH_SYNC_THRESHOLD, bytes of chunk*n (default 512 MiB)
	StagingBytes            uintptr // CECOLL_STAGING_BYTES, staging window per rank (default 32 MiB)
	FlagWrite               string  // CECOLL_FLAG_WRITE: "auto" (default), "value" or "copy"
	Sync                    string  // CECOLL_SYNC: "auto" (default), "allpairs" or "star"
	HubBytes                int64   // CECOLL_HUB_BYTES, largest hub AllGather, chunk*n bytes (default 4 MiB; AlltoAll at most hubAlltoAllBytes; 0 picks the default, < 0 turns hub rounds off; the variable's 0 is off)
	NoEventRounds           bool    // CECOLL_EVENT_ROUNDS=0: grouped eager calls on one device sync by flags, not events (event.go)
}

// ConfigFromEnv returns the defaults overridden by the environment. A
// value that does not parse is reported (WARN) and the default kept.
func ConfigFromEnv() Config {
	cfg := Config{
		IntraBatchSyncFreq:      DefaultIntraBatchSyncFreq,
		IntraBatchSyncThreshold: DefaultIntraBatchSyncThreshold,
		StagingBytes:            DefaultStagingBytes,
		FlagWrite:               FlagWriteAuto,
		Sync:                    SyncAuto,
		HubBytes:                DefaultHubBytes,
	}
	if v, ok := envBytes("CECOLL_INTRA_BATCH_SYNC_FREQ"); ok {
		if v >= 1 && v <= 1<<20 {
			cfg.IntraBatchSyncFreq = int(v)
		} else {
			log.Warnf("CECOLL_INTRA_BATCH_SYNC_FREQ=%d out of range [1, 1048576]; using %d", v, cfg.IntraBatchSyncFreq)
		}
	}
	if v, ok := envBytes("CECOLL_INTRA_BATCH_SYNC_THRESHOLD"); ok {
		cfg.IntraBatchSyncThreshold = v
	}
	if v, ok := envBytes("CECOLL_STAGING_BYTES"); ok {
		cfg.StagingBytes = uintptr(v)
	}
	if v := envChoice("CECOLL_FLAG_WRITE", FlagWriteAuto, FlagWriteValue, FlagWriteCopy); v != "" {
		cfg.FlagWrite = v
	}
	if v := envChoice("CECOLL_SYNC", SyncAuto, SyncAllPairs, SyncStar); v != "" {
		cfg.Sync = v
	}
	if v := envChoice("CECOLL_EVENT_ROUNDS", "1", "0"); v == "0" {
		cfg.NoEventRounds = true
	}
	if v, ok := envBytes("CECOLL_HUB_BYTES"); ok {
		cfg.HubBytes = -1 // 0: off
		if v > 0 && v <= 1<<40 {
			cfg.HubBytes = int64(v)
		}
	}
	return cfg
}

// envChoice returns the variable's value (lower-cased) when it is one of
// choices, the first of which is the default; otherwise "" (after a
// warning, when it is set).
func envChoice(name string, choices ...string) string {
	v := strings.ToLower(strings.TrimSpace(os.Getenv(name)))
	if v == "" || slices.Contains(choices, v) {
		return v
	}
	log.Warnf("%s=%q: want %s; using %s", name, v, strings.Join(choices, ", "), choices[0])
	return ""
}

// envBytes parses an unsigned integer with an optional K, M or G suffix
// (powers of 1024).
func envBytes(name string) (uint64, bool) {
	s := strings.TrimSpace(os.Getenv(name))
	if s == "" {
		return 0, false
	}
	v, err := parseBytes(s)
	if err != nil {
		log.Warnf("%s=%q: %v; using the default", name, s, err)
		return 0, false
	}
	return v, true
}

func parseBytes(s string) (uint64, error) {
	shift := 0
	switch strings.ToUpper(s[len(s)-1:]) {
	case "K":
		shift = 10
	case "M":
		shift = 20
	case "G":
		shift = 30
	}
	if shift != 0 {
		s = s[:len(s)-1]
	}
	v, err := strconv.ParseUint(strings.TrimSpace(s), 0, 64)
	if err != nil {
		return 0, err
	}
	if v > (^uint64(0))>>shift {
		return 0, strconv.ErrRange
	}
	return v << shift, nil
}

// normalize fills zero fields with defaults and checks the rest.
func (cfg *Config) normalize() error {
	if cfg.IntraBatchSyncFreq == 0 {
		cfg.IntraBatchSyncFreq = DefaultIntraBatchSyncFreq
	}
	if cfg.IntraBatchSyncThreshold == 0 {
		cfg.IntraBatchSyncThreshold = DefaultIntraBatchSyncThreshold
	}
	if cfg.StagingBytes == 0 {
		cfg.StagingBytes = DefaultStagingBytes
	}
	if cfg.FlagWrite == "" {
		cfg.FlagWrite = FlagWriteAuto
	}
	if cfg.Sync == "" {
		cfg.Sync = SyncAuto
	}
	if cfg.HubBytes == 0 {
		cfg.HubBytes = DefaultHubBytes
	}
	if cfg.IntraBatchSyncFreq < 1 {
		return result.Errorf(result.InvalidArgument, "ce: intra-batch sync frequency %d: want >= 1", cfg.IntraBatchSyncFreq)
	}
	switch cfg.FlagWrite {
	case FlagWriteAuto, FlagWriteValue, FlagWriteCopy:
	default:
		return result.Errorf(result.InvalidArgument, "ce: flag write %q: want auto, value or copy", cfg.FlagWrite)
	}
	switch cfg.Sync {
	case SyncAuto, SyncAllPairs, SyncStar:
	default:
		return result.Errorf(result.InvalidArgument, "ce: sync %q: want auto, allpairs or star", cfg.Sync)
	}
	return nil
}

// Engine is one rank's CE state for one communicator. Its methods are safe
// for concurrent use (calls are serialised), but a communicator's
// collectives must still be issued in the same order on every rank.
type Engine struct {
	mu      sync.Mutex
	live    bool
	aborted bool // Abort ran: Launch refuses, waits are being released
	able    bool // Implemented for this runtime, computed once
	lazy    bool // seed.b15: setup deferred to the first Launch
	held    bool // holdShared ran: release hands the internal windows' memory to c

	c    Comm
	rt   hip.Runtime
	cfg  Config
	caps hip.Caps
	rank int
	n    int
	dev  int

	// Sync window: ready array at 0, complete array at complOff.
	syncBase hip.DevicePtr
	syncSize uintptr
	syncWin  Window
	complOff uintptr
	mc       hip.DevicePtr // multicast address of the sync window; 0: unicast
	mcTried  bool          // seed.b6: lazy multicast set-up done
	star     bool          // SyncStar: rank 0 coordinates every sync
	rootRel  bool          // star on one device: releases in the coordinator's array (Engine.sync)
	rooted   bool          // Scatter and Gather sync at their root (Engine.rootedRound)
	hub      bool          // small AllGather and AlltoAll may run as hub rounds (Engine.hubRound)
	oneDev   bool          // rooted, every rank on this device in this process: grouped Scatter and Gather release first (Engine.releasedRound)

	// Device words for copy-based flag writes (B4/B5): the constant 1,
	// copied by every sync with copied flags, eager or captured (and the
	// seed modes' sequence value, see wordSeq).
	words    hip.DevicePtr
	flagCopy bool
	hostSeq  uint32 // seed.b4 only: the host-memory source the seed used

	// Staging window.
	stageBase hip.DevicePtr
	stageWin  Window
	stageSize uintptr

	seq      uint32 // last eager sync value
	useCompl bool   // the next sync uses the complete array

	// Ordering (B19): the end of the last eager collective, and of the last
	// captured one.
	ev        hip.Event
	evStream  hip.Stream
	evValid   bool
	capEv     hip.Event
	capStream hip.Stream
	capValid  bool

	// Abort: the internal stream its release writes go on, the loop that
	// repeats them (every sync resets its array after the wait, so a single
	// write releases only the wait pending now), and how long Finalize
	// waits for the last collective (CECOLL_TIMEOUT; after Abort at most
	// CECOLL_ABORT_TIMEOUT).
	abortStream hip.Stream
	relStop     chan struct{}
	relDone     chan struct{}
	drainLimit  time.Duration

	// Side stream, for ranks that have their device to themselves in this
	// process (Comm.DeviceShared false): a large local copy runs there,
	// beside the batch of peer copies, instead of inside it. Measured on
	// two H200s, the copies of one batch ran one after another, so
	// AllGather's local copy of N=2 cost a sixth of the time (84% of the
	// peer-copy ceiling at 1 GiB). sideFork and sideJoin fork it off and
	// join it back; sidePending: a join is owed before the call ends.
	side        hip.Stream
	sideFork    hip.Event
	sideJoin    hip.Event
	sidePending bool

	// Event rounds (event.go): this rank's ready and done events, created
	// where oneDev holds, and the state of the round being issued.
	evReady, evDone hip.Event
	evr             evRound

	// own is the rank's own block of the round being built, when it is
	// copied on the collective's stream ahead of the peers' blocks
	// (Engine.addOwn).
	own ownCopy

	// Preallocated parameter arrays (B16).
	ops      []hip.MemOp
	dsts     []hip.DevicePtr
	srcs     []hip.DevicePtr
	sizes    []uintptr
	bounds   []int // bounds[j]: copies queued before slot j
	attrs    [1]hip.CopyAttributes
	attrIdxs [1]uintptr
	members  []hip.DevicePtr
}

// Init sets up the rank's CE state. Collective: every rank of c calls it
// (it registers windows and calls c.Barrier). Never call it under capture
// (B15): communicator creation is the place.
func Init(c Comm, cfg Config) (*Engine, error) {
	if c == nil {
		return nil, result.Errorf(result.InvalidArgument, "ce init: nil communicator")
	}
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	e := &Engine{c: c, rt: c.Runtime(), cfg: cfg, rank: c.Rank(), n: c.Size(), dev: c.Device(),
		drainLimit: envSeconds("CECOLL_TIMEOUT", defaultTimeout)}
	if e.rt == nil || e.n < 1 || e.rank < 0 || e.rank >= e.n {
		return nil, result.Errorf(result.InvalidArgument, "ce init: bad communicator (rank %d of %d)", e.rank, e.n)
	}
	if seed.b15 {
		// The seed initialised lazily, at the first collective, which may
		// run inside a capture.
		e.lazy, e.live = true, true
		return e, nil
	}
	if err := e.setup(); err != nil {
		e.release()
		return nil, err
	}
	e.live = true
	if log.Enabled(log.LevelInfo) {
		log.Infof("ce init: rank %d/%d dev %d sync window %#x (%d B, complete at +%d) %s sync, flag writes by %s, staging %d B",
			e.rank, e.n, e.dev, uintptr(e.syncBase), e.syncSize, e.complOff, e.syncKind(), e.flagKind(), e.stageSize)
	}
	return e, nil
}

func (e *Engine) syncKind() string {
	switch {
	case e.star:
		return "star (unicast)"
	case e.mc != 0:
		return "all-pairs multicast"
	}
	return "all-pairs unicast"
}

func (e *Engine) flagKind() string {
	if e.flagCopy {
		return "copy"
	}
	return "write-value"
}

// setup builds everything Init promises; on error release undoes what
// was built.
func (e *Engine) setup() error {
	rt, n := e.rt, e.n
	if err := rt.SetDevice(e.dev); err != nil {
		return initErr("set device", err)
	}
	// Before any window exists: from its registration on, this rank's
	// streams may write into its peers' internal windows.
	e.holdShared()
	e.caps = rt.Caps()
	e.able = Implemented(rt, FuncAllGather, 0, 0)
	switch e.cfg.FlagWrite {
	case FlagWriteCopy:
		e.flagCopy = true
	case FlagWriteValue:
		if !e.caps.PeerWriteValue {
			return result.Errorf(result.InvalidUsage, "ce init: flag write %q asked for, but this device refuses write-value to peer memory (use auto or copy)", FlagWriteValue)
		}
		if e.c.DeviceShared() {
			log.Warnf("ce init: rank %d: CECOLL_FLAG_WRITE=value with other ranks of this process on device %d: measured to deadlock at times on the H200", e.rank, e.dev)
		}
	default:
		// Copies also where ranks of this process share the device: on one
		// H200, 5 of 8 runs of the B9 thread cases (9 ranks) hung with
		// write-value flags and none of 8 with copies, which were also the
		// faster (8 B AllGather graph replays, N=4: 35 against 41 us).
		e.flagCopy = (!e.caps.PeerWriteValue || e.c.DeviceShared()) && !seed.b5
	}

	// The sync algorithm: from the configuration, n, the backend and
	// OneDevice only, so every rank picks the same.
	mcUsable := e.caps.Multicast && n > 2 && !seed.b6
	switch e.cfg.Sync {
	case SyncStar:
		e.star = n > 1
	case SyncAuto:
		e.star = n >= 4 && !e.caps.Multicast
	}
	e.rootRel = e.star && e.c.OneDevice() && !seqFlags()
	// Half syncs at the root for Scatter and Gather, except with the
	// seed's sync and the seed's flag protocol.
	e.rooted = e.cfg.Sync != SyncAllPairs && !seqFlags()
	// With every rank on one device (where they were measured), grouped
	// Scatter and Gather release first and small AllGather and AlltoAll
	// run as hub rounds.
	e.oneDev = e.rooted && e.c.OneDevice()
	e.hub = e.oneDev && e.cfg.HubBytes > 0

	// Sync window (B17: zeroed before anyone uses it; the barrier below
	// makes sure every rank's zeroing is done before any peer writes):
	// two arrays of n slots, or under rootRel rank 0's lane words and
	// then one release word per peer.
	words := n
	if e.rootRel {
		words = max(n, laneWords(n)+n-1)
	}
	e.complOff = alignUp(uintptr(words)*4, 16)
	e.syncSize = 2 * e.complOff
	var err error
	if e.syncBase, err = rt.MemAlloc(e.syncSize); err != nil {
		return initErr("sync window alloc", err)
	}
	if !seed.b17 {
		if err := rt.Memset(e.syncBase, 0, e.syncSize); err != nil {
			return initErr("sync window zero", err)
		}
	}
	if e.syncWin, err = e.c.RegisterWindow(e.syncBase, e.syncSize); err != nil {
		return initErr("sync window register", err)
	}

	// Device words: the constant 1 that copied flags carry, and n more
	// ones, the source of a rootRel release.
	w := make([]uint32, wordOnes/4+n+1) // the ones, then a zero
	w[wordGraph/4] = graphSyncValue
	for i := range n {
		w[wordOnes/4+i] = graphSyncValue
	}
	if e.words, err = rt.MemAlloc(uintptr(len(w)) * 4); err != nil {
		return initErr("flag words alloc", err)
	}
	if err := copyWords(rt, e.words, w); err != nil {
		return initErr("flag words init", err)
	}

	// Staging window.
	e.stageSize = e.cfg.StagingBytes
	if e.stageBase, err = rt.MemAlloc(e.stageSize); err != nil {
		return initErr("staging window alloc", err)
	}
	if e.stageWin, err = e.c.RegisterWindow(e.stageBase, e.stageSize); err != nil {
		return initErr("staging window register", err)
	}

	// The side stream (see Engine.side): not where ranks of this process
	// share the device, since a stream parked on a flag wait there stalls
	// any stream that shares its hardware queue.
	if n > 1 && !e.c.DeviceShared() {
		if e.side, err = rt.StreamCreate(); err != nil {
			return initErr("side stream create", err)
		}
		if e.sideFork, err = rt.EventCreate(hip.EventDisableTiming); err != nil {
			return initErr("event create", err)
		}
		if e.sideJoin, err = rt.EventCreate(hip.EventDisableTiming); err != nil {
			return initErr("event create", err)
		}
	}

	// Event rounds' events (event.go).
	if e.oneDev && !e.cfg.NoEventRounds {
		if e.evReady, err = rt.EventCreate(hip.EventDisableTiming); err != nil {
			return initErr("event create", err)
		}
		if e.evDone, err = rt.EventCreate(hip.EventDisableTiming); err != nil {
			return initErr("event create", err)
		}
	}

	// Ordering events.
	if e.ev, err = rt.EventCreate(hip.EventDisableTiming); err != nil {
		return initErr("event create", err)
	}
	if e.capEv, err = rt.EventCreate(hip.EventDisableTiming); err != nil {
		return initErr("event create", err)
	}

	// Parameter arrays, sized for the largest call (B16): a UC sync under
	// capture needs 2(n-1) flag entries and n resets; a collective at most
	// n copies per batch (a hub round too: it issues two).
	e.ops = make([]hip.MemOp, 0, 3*n+2)
	e.dsts = make([]hip.DevicePtr, 0, n)
	e.srcs = make([]hip.DevicePtr, 0, n)
	e.sizes = make([]uintptr, 0, n)
	e.bounds = make([]int, n+1)
	e.attrs[0] = hip.CopyAttributes{SrcAccessOrder: hip.SrcAccessOrderStream, Flags: hip.CopyFlagPreferOverlapWithCompute}
	e.attrIdxs[0] = 0
	e.members = make([]hip.DevicePtr, n)
	for r := range n {
		e.members[r] = e.syncWin.PeerBase(r)
	}

	// The first eager value is 2: 0 is the reset value and 1 the graph
	// constant (B10).
	e.seq = 1
	if seed.b10 {
		e.seq = 0
	}

	// Multicast, eagerly and before the barrier (B6); only with more than
	// two ranks, where one write replaces several, and only for allpairs.
	if mcUsable && !e.star {
		if e.mc, err = rt.MulticastCreate(e.members, e.syncSize); err != nil {
			return initErr("multicast create", err)
		}
	}
	if err := e.c.Barrier(); err != nil {
		return initErr("barrier", err)
	}
	return nil
}

// graphSyncValue is the flag value of every sync inside a captured graph,
// and of every sync with copied flags.
const graphSyncValue = 1

// Offsets inside Engine.words: the constant 1, the eager value of the seed
// modes (seqFlags), and the ones and zeros that a rootRel release and
// reset copy (Engine.zeros).
const (
	wordGraph = 0
	wordSeq   = 4
	wordOnes  = 8 // n words of 1, then a word of 0
)

func initErr(what string, err error) error {
	return result.Errorf(result.Of(err), "ce init: %s: %w", what, err)
}

// release frees whatever setup built. It never waits for peers; the
// memory of the internal windows may outlive it (see SharedMem).
func (e *Engine) release() error {
	rt := e.rt
	if rt == nil {
		return nil
	}
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if e.abortStream != hip.StreamNull {
		keep(rt.StreamDestroy(e.abortStream))
	}
	e.abortStream = hip.StreamNull
	if e.mc != 0 {
		keep(rt.MulticastDestroy(e.mc))
		e.mc = 0
	}
	if e.side != 0 {
		keep(rt.StreamDestroy(e.side))
		e.side = 0
	}
	for _, ev := range [...]*hip.Event{&e.ev, &e.capEv, &e.sideFork, &e.sideJoin, &e.evReady, &e.evDone} {
		if *ev != 0 {
			keep(rt.EventDestroy(*ev))
			*ev = 0
		}
	}
	for _, w := range [...]*Window{&e.stageWin, &e.syncWin} {
		if *w != nil {
			keep(e.c.DeregisterWindow(*w))
			*w = nil
		}
	}
	if e.words != 0 { // read by this rank's streams only
		keep(rt.MemFree(e.words))
		e.words = 0
	}
	keep(e.freeShared(&e.stageBase, &e.syncBase))
	e.evValid, e.capValid = false, false
	return first
}

// Finalize releases the CE state; local and idempotent, it never waits for
// peers. It first waits for the communicator's last collective (the B19
// ordering event), since streams may still read and write the flags and
// the staging window it frees; if that does not complete within
// CECOLL_TIMEOUT seconds (default 600; after Abort, CECOLL_ABORT_TIMEOUT,
// default 5) it logs a warning and leaves the state allocated (with a
// SharedMem communicator its hold stays too, so the peers' internal
// windows its streams may still write are never freed either). Work
// enqueued outside Launch and OrderAfter (a graph launched on another
// stream without them) is not covered. Launch fails with InvalidUsage
// afterwards.
func (e *Engine) Finalize() error {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.live {
		return nil
	}
	e.live = false
	if err := e.rt.SetDevice(e.dev); err != nil {
		e.stopRelease()
		return result.Errorf(result.UnhandledCudaError, "ce finalize: set device: %w", err)
	}
	drained := !e.evValid || e.waitDone(func() error { return e.rt.EventQuery(e.ev) })
	e.stopRelease()
	if drained && e.abortStream != hip.StreamNull {
		drained = e.waitDone(func() error { return e.rt.StreamQuery(e.abortStream) })
	}
	if !drained {
		log.Warnf("ce finalize: rank %d: the last collective did not complete within %v; leaving the CE state allocated", e.rank, e.drainLimit)
		return nil
	}
	if err := e.release(); err != nil {
		return result.Errorf(result.Of(err), "ce finalize: %w", err)
	}
	return nil
}

// waitDone polls query (EventQuery, StreamQuery) until it reports done,
// for at most e.drainLimit. Polling rather than a blocking synchronize
// keeps the wait bounded without leaving a goroutine behind. A query
// error other than not-ready ends the wait (the work is not running).
func (e *Engine) waitDone(query func() error) bool {
	deadline := time.Now().Add(e.drainLimit)
	pause := 20 * time.Microsecond
	for {
		err := query()
		if err == nil {
			return true
		}
		if !errors.Is(err, hip.ErrNotReady) {
			log.Warnf("ce finalize: rank %d: %v", e.rank, err)
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
	}
}

// Abort releases every flag wait this rank's streams have queued or will
// reach, without waiting for peers: it writes releaseValue into every word
// its waits watch, in both arrays (Engine.waitWords: never a word a peer
// waits on), from the engine's own stream (stream writes, not a
// synchronous copy, which may stall while streams are parked on waits), and
// repeats the writes every millisecond until Finalize, because each sync
// resets its array after its waits. Launch then fails with InvalidUsage
// ("communicator aborted"). Idempotent. Collectives released this way move
// whatever their buffers hold: their results are undefined. Peers are not
// released by it where flags are copied (the default where ranks share a
// device): the released stream's later flag copies carry 0. Write-value
// flags carry their value in the op, so there a released rank's later
// flags still count for its peers.
func (e *Engine) Abort() error {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.live || e.aborted {
		return nil
	}
	e.aborted = true
	e.drainLimit = min(e.drainLimit, envSeconds("CECOLL_ABORT_TIMEOUT", defaultAbortTimeout))
	if e.n == 1 || e.syncBase == 0 {
		return nil // no flag waits (one rank, or seed.b15 before set-up)
	}
	if err := e.rt.SetDevice(e.dev); err != nil {
		return result.Errorf(result.UnhandledCudaError, "ce abort: set device: %w", err)
	}
	// The stream for the release writes is made here, not at Init: on a
	// GPU every live stream takes one of the context's hardware queues, and
	// when ranks of one process share a device, a stream parked on a flag
	// wait stalls whatever shares its queue (measured on the H200: the
	// thread-per-rank tests hung more often with a second, idle stream per
	// rank). Should creation fail, the writes go on the legacy NULL stream.
	if e.abortStream == 0 {
		s, err := e.rt.StreamCreate()
		if err != nil {
			log.Warnf("ce abort: rank %d: stream create: %v; releasing on the NULL stream", e.rank, err)
			s = hip.StreamNull
		}
		e.abortStream = s
	}
	// First, zero the sources of this rank's copied flags: its stream,
	// once released, goes on to copy them to its peers, and a rank's abort
	// must not release a peer (a star's rank 0 would release everyone).
	// The default write-value fence keeps these before the releases.
	ops := make([]hip.MemOp, 0, 3*e.n+1)
	ops = append(ops, hip.WriteValue32(e.words+wordGraph, 0))
	for i := range e.n {
		ops = append(ops, hip.WriteValue32(e.words+hip.DevicePtr(wordOnes+4*i), 0))
	}
	for _, arr := range [2]uintptr{0, e.complOff} {
		for _, p := range e.waitWords(arr) {
			ops = append(ops, hip.WriteValue32(p, releaseValue))
		}
	}
	if err := hip.BatchMemOps(e.rt, e.abortStream, ops); err != nil {
		return result.Errorf(result.Of(err), "ce abort: release flag waits: %w", err)
	}
	e.relStop, e.relDone = make(chan struct{}), make(chan struct{})
	go e.releaseLoop(ops, e.relStop, e.relDone)
	return nil
}

// releaseLoop repeats Abort's release writes until stop closes. It touches
// only what Finalize frees after stopping it.
func (e *Engine) releaseLoop(ops []hip.MemOp, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := e.rt.SetDevice(e.dev); err != nil {
		log.Warnf("ce abort: rank %d: set device: %v", e.rank, err)
		return
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if err := hip.BatchMemOps(e.rt, e.abortStream, ops); err != nil {
			log.Warnf("ce abort: rank %d: release flag waits: %v", e.rank, err)
			return
		}
	}
}

// stopRelease ends Abort's release loop, if running; e.mu held.
func (e *Engine) stopRelease() {
	if e.relStop == nil {
		return
	}
	close(e.relStop)
	<-e.relDone
	e.relStop, e.relDone = nil, nil
}

// Timeouts of Finalize's wait for the last collective, in seconds.
const (
	defaultTimeout      = 600 * time.Second
	defaultAbortTimeout = 5 * time.Second
)

// envSeconds reads a duration in seconds (fractions allowed) from the
// environment; a value that does not parse is reported and def kept.
func envSeconds(name string, def time.Duration) time.Duration {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 1e9 {
		log.Warnf("%s=%q: want seconds >= 0; using %v", name, v, def)
		return def
	}
	return time.Duration(f * float64(time.Second))
}

// Implemented reports whether fn can run on copy engines with rt: the four
// data-movement collectives on a runtime that has stream memory operations
// (CUDA driver >= 12.5 as NCCL requires; HIP >= 7.0, where
// hipStreamBatchMemOp exists; the host device always). redOp is ignored;
// datatype must be an NCCL type.
func Implemented(rt hip.Runtime, fn Func, redOp int32, datatype int32) bool {
	_ = redOp
	if rt == nil || datatype < 0 || datatype >= numTypes {
		return false
	}
	switch fn {
	case FuncAllGather, FuncAlltoAll, FuncScatter, FuncGather:
	default:
		return false
	}
	switch rt.Name() {
	case "host":
		return true
	case "nvidia":
		v, err := rt.DriverVersion()
		return err == nil && v >= 12050
	case "amd":
		v, err := rt.DriverVersion()
		return err == nil && v >= 70000000
	}
	return false
}

// numTypes is ncclNumTypes; eltSizes[t] is the size of ncclDataType_t t.
const numTypes = 12

var eltSizes = [numTypes]uintptr{1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1}

func alignUp(x, a uintptr) uintptr { return (x + a - 1) &^ (a - 1) }
