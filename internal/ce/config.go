package ce

import (
	"strconv"

	"cecoll/internal/hip"
	"cecoll/internal/param"
	"cecoll/internal/result"
)

// Defaults of Config.
const (
	DefaultIntraBatchSyncFreq      = 8
	DefaultIntraBatchSyncThreshold = 512 << 20
	// DefaultStagingBytes is the staging window per rank: 64 MiB. Calls on
	// unregistered buffers move at most this much per receiver per round,
	// each round costing two syncs; in-place AlltoAll uses it as the
	// scratch of its swaps, where 32 MiB (8 MiB pieces at 8 ranks) reached
	// only 31-48% of the copy ceiling on one H200 against 60-62% with 64
	// (docs/performance.md, "In-place AlltoAll").
	DefaultStagingBytes = 64 << 20
	// DefaultHubBytes bounds a hub AllGather (chunk*n bytes per rank); see
	// plan.go. docs/performance.md, "Where hub rounds stop", has the sweep.
	DefaultHubBytes = 4 << 20
	// hubAlltoAllBytes bounds a hub AlltoAll (chunk*n) below HubBytes: its
	// 2D copies lose to pushes sooner (same sweep).
	hubAlltoAllBytes = 256 << 10
)

// Flag-write methods (Config.FlagWrite).
const (
	FlagWriteAuto  = "auto"  // write-value where Caps().PeerWriteValue, else copy
	FlagWriteValue = "value" // stream write-value into the peer's word
	FlagWriteCopy  = "copy"  // 4-byte copy from a device word (B5)
)

// Sync algorithms of a full flag sync (Config.Sync).
const (
	// SyncAuto: star from 4 ranks up unless the device has multicast,
	// all pairs otherwise: the faster of the two at each size
	// (docs/performance.md, "Star or all pairs").
	SyncAuto = "auto"
	// SyncAllPairs: every rank signals every peer (n(n-1) writes, one
	// hop), or once through multicast.
	SyncAllPairs = "allpairs"
	// SyncStar: the peers signal rank 0, which waits for them and then
	// signals every peer: 2(n-1) writes, two hops.
	SyncStar = "star"
)

// Config holds the engine's tunables. Every rank of a communicator must use
// the same values: they decide plans, hence the number of syncs of a call.
type Config struct {
	IntraBatchSyncFreq      int     // copies per sub-batch (CECOLL_INTRA_BATCH_SYNC_FREQ)
	IntraBatchSyncThreshold uint64  // bytes of chunk*n from which pushes are sub-batched
	StagingBytes            uintptr // staging window per rank (CECOLL_STAGING_BYTES)
	FlagWrite               string  // FlagWrite* (CECOLL_FLAG_WRITE)
	Sync                    string  // Sync* (CECOLL_SYNC)
	HubBytes                int64   // largest hub AllGather, chunk*n; < 0: no hub plans (CECOLL_HUB_BYTES=0)
	NoEvents                bool    // never sync by events (CECOLL_EVENTS=0)
}

// ConfigFromEnv returns the configuration the environment sets
// (internal/param declares the variables and parses them).
func ConfigFromEnv() Config {
	cfg := Config{
		IntraBatchSyncFreq:      param.IntraBatchSyncFreq.Get(),
		IntraBatchSyncThreshold: param.IntraBatchSyncThreshold.Get(),
		StagingBytes:            param.StagingBytes.Get(),
		FlagWrite:               param.FlagWrite.Get(),
		Sync:                    param.Sync.Get(),
		HubBytes:                param.HubBytes.Get(),
		NoEvents:                !param.Events.Get(),
	}
	if cfg.HubBytes == 0 {
		cfg.HubBytes = -1 // the variable's 0 is off
	}
	return cfg
}

// Setting is one value every rank of a communicator must run with alike,
// named as the user sets it.
type Setting struct{ Name, Value string }

// Agreed lists what decides a communicator's plans and syncs: the
// sub-batches of a push round (B9), the staging rounds, the shape of a
// full sync, hub plans, event syncs, how eager flags are written, and the
// device's multicast support (it decides the sync shape too). A rank that
// differs in any of them runs other syncs or copies than its peers: it
// hangs, or moves wrong bytes. So every rank must run with the same values
// (internal/comm compares them at init). caps are the runtime's.
func (cfg Config) Agreed(caps hip.Caps) []Setting {
	hub := cfg.HubBytes
	if hub < 0 {
		hub = 0 // off, as CECOLL_HUB_BYTES=0 says it
	}
	events := "1"
	if cfg.NoEvents {
		events = "0"
	}
	return []Setting{
		{param.IntraBatchSyncFreq.Name(), strconv.Itoa(cfg.IntraBatchSyncFreq)},
		{param.IntraBatchSyncThreshold.Name(), strconv.FormatUint(cfg.IntraBatchSyncThreshold, 10)},
		{param.StagingBytes.Name(), strconv.FormatUint(uint64(cfg.StagingBytes), 10)},
		{param.FlagWrite.Name(), cfg.FlagWrite},
		{param.Sync.Name(), cfg.Sync},
		{param.HubBytes.Name(), strconv.FormatInt(hub, 10)},
		{param.Events.Name(), events},
		{"the device's multicast support (CECOLL_HOST_CAPS=nomulticast on the host device)", strconv.FormatBool(caps.Multicast)},
	}
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
	if cfg.StagingBytes < 4096 {
		return result.Errorf(result.InvalidArgument, "ce: staging window of %d bytes: want at least 4096", cfg.StagingBytes)
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
