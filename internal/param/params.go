package param

import (
	"math"
	"time"
)

// The words of the log's variables.
var (
	debugLevels = []string{"NONE", "VERSION", "WARN", "INFO", "TRACE"}
	// NCCL's subsystem names, in internal/log's bit order; cecoll logs
	// INIT, COLL, ENV, BOOTSTRAP and REG, and takes the others so that an
	// NCCL setting is never refused.
	debugSubsystems = []string{"INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "CALL",
		"PROXY", "NVLS", "BOOTSTRAP", "REG", "PROFILE", "RAS"}
	socketFamilies = []string{"AF_INET", "AF_INET6"}
)

// Every environment variable cecoll reads, once each. docs/environment.md's
// tables, the README's short list and docs/tuning.md follow these
// declarations (docs_test.go checks them).
var (
	// Backend is read by internal/hip/backend, which refuses a bad value.
	Backend = newChoice("CECOLL_BACKEND", User, "auto", []string{"auto", "nvidia", "amd", "host"},
		"device runtime: auto (the first GPU backend that loads, else the host device), nvidia, amd or host").strictly()
	// The log's (internal/log). Each CECOLL_ variable reads its NCCL twin
	// when blank, with NCCL's meaning.
	NCCLDebug = newChoice("NCCL_DEBUG", User, "WARN", debugLevels,
		"NCCL's name for CECOLL_DEBUG, read when that is blank")
	Debug = newChoice("CECOLL_DEBUG", User, "WARN", debugLevels,
		"log level: NONE, VERSION (the version banner only), WARN, INFO (set-up decisions, the path each call took) or TRACE").orElse(NCCLDebug)
	NCCLDebugSubsys = newMask("NCCL_DEBUG_SUBSYS", User, debugSubsystems,
		"NCCL's name for CECOLL_DEBUG_SUBSYS, read when that is blank")
	DebugSubsys = newMask("CECOLL_DEBUG_SUBSYS", User, debugSubsystems,
		"subsystems whose INFO and TRACE lines are logged (cecoll's: INIT, BOOTSTRAP, ENV, COLL, REG); unset: all, or NCCL's INIT,BOOTSTRAP,ENV when the level comes from NCCL_DEBUG").orElse(NCCLDebugSubsys)
	NCCLDebugFile = newString("NCCL_DEBUG_FILE", User, "stderr", "as CECOLL_DEBUG_FILE",
		"NCCL's name for CECOLL_DEBUG_FILE, read when that is blank; a real NCCL writing the same file shares it")
	DebugFile = newString("CECOLL_DEBUG_FILE", User, "stderr", "a path; %h host name, %p pid, %% a %",
		"log file instead of stderr, opened for appending; %h becomes the host name, %p the pid").orElse(NCCLDebugFile)

	// The engine's (internal/ce). Every rank of a communicator must see the
	// same values: they decide how many flag syncs a call makes.
	StagingBytes = newBytes[uintptr]("CECOLL_STAGING_BYTES", User, 64<<20, 4<<10, 64<<30,
		"internal staging window per rank, for buffers outside any window")
	IntraBatchSyncFreq = newBytes[int]("CECOLL_INTRA_BATCH_SYNC_FREQ", Tuning, 8, 1, 1<<20,
		"copies per sub-batch when intra-batch sync applies")
	IntraBatchSyncThreshold = newBytes[uint64]("CECOLL_INTRA_BATCH_SYNC_THRESHOLD", Tuning, 512<<20, 1, 1<<40,
		"bytes (chunk x ranks) from which AllGather and AlltoAll split their copies into sub-batches with a sync between them")
	FlagWrite = newChoice("CECOLL_FLAG_WRITE", Tuning, "auto", []string{"auto", "value", "copy"},
		"how eager calls' flags reach peers: value (stream write-value), copy (4-byte copies from a device word), auto (value where the driver allows it, else copy); captured calls always copy")
	Sync = newChoice("CECOLL_SYNC", Tuning, "auto", []string{"auto", "allpairs", "star"},
		"flag-sync algorithm: allpairs (every rank writes every peer), star (rank 0 gathers and releases), auto (star from 4 ranks up unless the device has multicast)")
	HubBytes = newBytes[int64]("CECOLL_HUB_BYTES", Tuning, 4<<20, 0, 1<<40,
		"largest grouped AllGather (chunk x ranks) with every rank on one device that runs as a hub plan, rank 0 making every copy; 0 turns hub plans off")
	Events = newBool("CECOLL_EVENTS", Tuning, true,
		"1: a grouped eager call holding every rank, all on one device in this process, syncs by events; 0: flag signals always")
	Timeout = newSeconds("CECOLL_TIMEOUT", User, 600*time.Second,
		"seconds a collective or graph replay may stay pending without progress before the communicator fails with ncclRemoteError; also how long a finalized engine waits for its streams before it leaks rather than frees")
	AbortTimeout = newSeconds("CECOLL_ABORT_TIMEOUT", User, 5*time.Second,
		"that wait after an abort, in seconds")
	CheckPointers = newBool("CECOLL_CHECK_POINTERS", User, false,
		"1: refuse, at the call, buffers that are neither device nor pinned host memory (as NCCL_CHECK_POINTERS)")

	// The communicators' (internal/comm).
	BootstrapTimeout = newSeconds("CECOLL_BOOTSTRAP_TIMEOUT", User, 300*time.Second,
		"seconds a rank waits for its peers at init and at window registration")
	Check = newBool("CECOLL_CHECK", User, false,
		"1: the ranks of a multi-process communicator cross-check every collective's signature and every receive's size against its send's")
	NCCLSocketIfname = newString("NCCL_SOCKET_IFNAME", User, "loopback", "as CECOLL_SOCKET_IFNAME",
		"NCCL's name for CECOLL_SOCKET_IFNAME, read when that is blank")
	SocketIfname = newString("CECOLL_SOCKET_IFNAME", User, "loopback", "name prefixes, =name exact, ^ excludes; comma list",
		"interface of the bootstrap listener; blank: NCCL_SOCKET_IFNAME, else loopback").orElse(NCCLSocketIfname)
	NCCLSocketFamily = newChoice("NCCL_SOCKET_FAMILY", User, "", socketFamilies,
		"NCCL's name for CECOLL_SOCKET_FAMILY, read when that is blank").shown("unset")
	SocketFamily = newChoice("CECOLL_SOCKET_FAMILY", User, "", socketFamilies,
		"address family of the bootstrap listener and of a host name in CECOLL_COMM_ID: AF_INET or AF_INET6; unset: IPv4 first").shown("unset").orElse(NCCLSocketFamily)
	// NCCL_COMM_ID is the real library's while one is loaded: cecoll's
	// bootstrap then reads only CECOLL_COMM_ID. A bad address fails
	// ncclGetUniqueId (Err), as NCCL's: a random root instead would leave
	// the processes waiting at the given one.
	NCCLCommID = newAddress("NCCL_COMM_ID", User,
		"NCCL's name for CECOLL_COMM_ID, read when that is blank and no real NCCL or RCCL is loaded").strictly()
	CommID = newAddress("CECOLL_COMM_ID", User,
		"the bootstrap root's address: ncclGetUniqueId names it in every process alike, and rank 0's init listens there").strictly().orElse(NCCLCommID).unlessForwarding()

	// Forward mode (internal/forward): the real NCCL/RCCL behind cecoll, and
	// which calls go to the copy engines. Every rank of a communicator must
	// see the same routing values: they are agreed at init, a mismatch fails it.
	NCCLLib = newString("CECOLL_NCCL_LIB", User, "unset", "a path to libnccl.so.2 or librccl.so.1",
		"the real library to forward to; unset: the one the program linked (cecoll preloaded), else, where cecoll sits in place of libnccl.so.2 or librccl.so.1, the loader's path and torch's nvidia/nccl/lib")
	Route = newChoice("CECOLL_ROUTE", User, "auto", []string{"auto", "ce", "nccl"},
		"with a real library: which calls of the operations copy engines run go to them: auto (zero-SM communicators, buffers in symmetric windows, and per-rank blocks from CECOLL_ROUTE_BYTES), ce (all), nccl (none)")
	RouteBytes = newBytes[uint64]("CECOLL_ROUTE_BYTES", User, 64<<20, 1, 1<<40,
		"CECOLL_ROUTE=auto: the per-rank block (count x element size) from which those collectives take the copy engines")
	NCCLCTAPolicy = newInt[int]("NCCL_CTA_POLICY", User, 0, 0, 255, "an NCCL_CTA_POLICY_* value (2: ZERO)",
		"NCCL's; read when a communicator's config leaves CTAPolicy unset: NCCL_CTA_POLICY_ZERO (2) sends that communicator's copy-engine collectives to the copy engines")
	LDLibraryPath = newString("LD_LIBRARY_PATH", User, "unset", "the loader's colon list",
		"read only where cecoll sits in place of libnccl.so.2 or librccl.so.1: searched, cecoll's own file skipped, for the real library")

	// The CUDA driver's, read and set by internal/hip/nvidia.
	CUDADeviceMaxConnections = newString("CUDA_DEVICE_MAX_CONNECTIONS", User, "set by cecoll when unset: 32, or 8 under MPS", "1..32 (the driver caps larger values)",
		"hardware queues per context; a communicator with that many ranks on one device in one process is refused")
	CUDAMPSPipeDirectory = newString("CUDA_MPS_PIPE_DIRECTORY", User, "/tmp/nvidia-mps", "a directory",
		"MPS's; where its control daemon's socket is looked for: with one there, cecoll sets CUDA_DEVICE_MAX_CONNECTIONS to 8, not 32 (MPS clients share one pool of queues)")

	// The host device's (internal/hip/host), which refuses a bad value: a
	// test run on another device than the one asked for proves nothing.
	HostDevices = newInt[int]("CECOLL_HOST_DEVICES", Host, 8, 1, 4096, "an integer in 1..4096",
		"number of virtual devices; several ranks may share one").strictly()
	HostChaos = newInt[int64]("CECOLL_HOST_CHAOS", Host, 0, math.MinInt64, math.MaxInt64, "an int64 seed",
		"seed of the adversarial scheduler (0: off): shuffles and splits each batch's copies and delays streams, reproducibly").strictly()
	HostInline = newBool("CECOLL_HOST_INLINE", Host, true,
		"0: every op runs on its stream's worker goroutine; 1: an enqueueing thread runs what completes at once itself (off under chaos)").strictly()
	HostQueues = newInt[int]("CECOLL_HOST_QUEUES", Host, 0, 0, 32, "an integer in 0..32",
		"hardware queues of each virtual device, as CUDA_DEVICE_MAX_CONNECTIONS on a GPU (0: no limit): a stream with work pending holds one, and once every queue is held no other stream of the device runs, as on a GPU; inline execution is off").strictly()
	HostCaps = newList("CECOLL_HOST_CAPS", Host, []string{"nobatchcopy", "noattrs", "nopeerwrite", "nomulticast", "hipbatches"},
		"capabilities to switch off (nobatchcopy, noattrs, nopeerwrite, nomulticast) and hipbatches (HIP's memop order)").strictly()
)
