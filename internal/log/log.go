// Package log is cecoll's diagnostic output, as NCCL's: CECOLL_DEBUG (or,
// when blank, NCCL_DEBUG) selects the level, NONE, VERSION, WARN (the
// default), INFO or TRACE; CECOLL_DEBUG_SUBSYS (or NCCL_DEBUG_SUBSYS) the
// subsystems whose INFO and TRACE lines are printed; CECOLL_DEBUG_FILE (or
// NCCL_DEBUG_FILE) a file instead of stderr ("%h" becomes the host name,
// "%p" the pid, file.go). Lines read "host:pid:tid cecoll LEVEL text", so
// they stay cecoll's in a file a real NCCL writes too.
package log

import (
	"fmt"
	"io"
	"os"
	"sync"

	"cecoll/internal/osthread"
	"cecoll/internal/param"
)

// Level orders the verbosity, as NCCL_DEBUG's.
type Level int32

const (
	LevelNone Level = iota
	LevelVersion
	LevelWarn
	LevelInfo
	LevelTrace
)

// Subsys is a set of NCCL's subsystems (NCCL_DEBUG_SUBSYS), in the order
// of internal/param's names. Every INFO and TRACE line belongs to one;
// WARN and the version banner to all.
type Subsys uint64

const (
	Init Subsys = 1 << iota
	Coll
	P2P
	Shm
	Net
	Graph
	Tuning
	Env
	Alloc
	Call
	Proxy
	Nvls
	Bootstrap
	Reg
	Profile
	Ras

	All Subsys = 1<<iota - 1
)

// ncclDefault is NCCL's mask when NCCL_DEBUG_SUBSYS is unset. It applies
// when the level came from NCCL_DEBUG, so that an NCCL user's INFO shows
// what NCCL's would, not a line per collective; CECOLL_DEBUG shows all.
const ncclDefault = Init | Bootstrap | Env

var (
	once   sync.Once
	level  Level
	mask   Subsys
	mu     sync.Mutex
	out    io.Writer = os.Stderr
	prefix string
)

func setup() {
	level, mask = settings()
	host := shortHost()
	prefix = fmt.Sprintf("%s:%d", host, os.Getpid())
	var openErr error
	if name := param.DebugFile.Get(); name != "" {
		name = expand(name, host, os.Getpid())
		if f, err := openAppend(name); err == nil {
			out = f
		} else {
			openErr = fmt.Errorf("%s=%s: %w; logging to stderr", param.DebugFile.From(), param.DebugFile.Get(), err)
		}
	}
	// From here on a bad value of any other variable is a log line, at
	// this level and in this file.
	param.SetWarn(func(msg string) { Warnf("%s", msg) })
	if openErr != nil && level >= LevelWarn {
		emit("WARN", openErr.Error()) // Enabled would wait for this setup
	}
}

// settings reads the level and the subsystems.
func settings() (Level, Subsys) {
	l := LevelWarn
	switch param.Debug.Get() {
	case "NONE":
		l = LevelNone
	case "VERSION":
		l = LevelVersion
	case "INFO":
		l = LevelInfo
	case "TRACE":
		l = LevelTrace
	}
	m := Subsys(param.DebugSubsys.Get())
	if param.DebugSubsys.From() == "" && param.Debug.From() == param.NCCLDebug.Name() {
		m = ncclDefault
	}
	return l, m
}

// Setup reads the log's variables now rather than at the first message,
// so that warnings about other variables go to the log from the start.
// The export layer calls it once the environment is copied.
func Setup() { once.Do(setup) }

// Enabled reports whether messages of level l in subsystem s are printed.
// Check it before building costly arguments.
func Enabled(l Level, s Subsys) bool {
	once.Do(setup)
	return l <= level && s&mask != 0
}

func printf(l Level, s Subsys, name, format string, args []any) {
	if !Enabled(l, s) {
		return
	}
	emit(name, fmt.Sprintf(format, args...))
}

// emit writes one line.
func emit(name, msg string) {
	mu.Lock()
	fmt.Fprintf(out, "%s:%d cecoll %s %s\n", prefix, osthread.ID(), name, msg)
	mu.Unlock()
}

// Warnf reports something the user should know about (on by default, in
// every subsystem).
func Warnf(format string, args ...any) { printf(LevelWarn, All, "WARN", format, args) }

// Infof reports set-up decisions and the path a call took (level INFO).
func Infof(s Subsys, format string, args ...any) { printf(LevelInfo, s, "INFO", format, args) }

// Tracef reports per-call detail (level TRACE).
func Tracef(s Subsys, format string, args ...any) { printf(LevelTrace, s, "TRACE", format, args) }

var bannerOnce sync.Once

// Banner prints text (cecoll's version) once per process: alone on its
// line at level VERSION, as NCCL prints "NCCL version ...", and as an INFO
// line from INFO up. WARN, the default, stays quiet.
func Banner(text string) {
	bannerOnce.Do(func() {
		switch {
		case Enabled(LevelInfo, All):
			printf(LevelInfo, All, "INFO", "%s", []any{text})
		case level == LevelVersion: // set up by the Enabled above
			mu.Lock()
			fmt.Fprintln(out, text)
			mu.Unlock()
		}
	})
}
