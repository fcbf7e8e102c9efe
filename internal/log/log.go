// Package log is cecoll's diagnostic output, in NCCL_DEBUG's spirit:
// CECOLL_DEBUG=WARN (default), INFO or TRACE selects the level and
// CECOLL_DEBUG_FILE a file instead of stderr ("%h" becomes the host name,
// "%p" the pid). Lines read "host:pid:tid cecoll LEVEL text".
package log

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"cecoll/internal/osthread"
	"cecoll/internal/param"
)

// Level orders the verbosity.
type Level int32

const (
	LevelNone Level = iota
	LevelWarn
	LevelInfo
	LevelTrace
)

var (
	once   sync.Once
	level  Level
	mu     sync.Mutex
	out    io.Writer = os.Stderr
	prefix string
)

func setup() {
	switch param.Debug.Get() {
	case "NONE":
		level = LevelNone
	case "INFO":
		level = LevelInfo
	case "TRACE":
		level = LevelTrace
	default:
		level = LevelWarn
	}
	host, _ := os.Hostname()
	if name := param.DebugFile.Get(); name != "" {
		name = strings.ReplaceAll(name, "%h", host)
		name = strings.ReplaceAll(name, "%p", fmt.Sprint(os.Getpid()))
		if f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			out = f
		}
	}
	prefix = fmt.Sprintf("%s:%d", host, os.Getpid())
	// From here on a bad value of any other variable is a log line, at
	// this level and in this file.
	param.SetWarn(func(msg string) { Warnf("%s", msg) })
}

// Setup reads CECOLL_DEBUG and CECOLL_DEBUG_FILE now rather than at the
// first message, so that warnings about other variables go to the log from
// the start. The export layer calls it once the environment is copied.
func Setup() { once.Do(setup) }

// Enabled reports whether messages of level l are printed. Check it before
// building costly arguments.
func Enabled(l Level) bool {
	once.Do(setup)
	return l <= level
}

func printf(l Level, name, format string, args []any) {
	if !Enabled(l) {
		return
	}
	msg := fmt.Sprintf(format, args...)
	mu.Lock()
	fmt.Fprintf(out, "%s:%d cecoll %s %s\n", prefix, osthread.ID(), name, msg)
	mu.Unlock()
}

// Warnf reports something the user should know about (on by default).
func Warnf(format string, args ...any) { printf(LevelWarn, "WARN", format, args) }

// Infof reports set-up decisions and the path a call took (CECOLL_DEBUG=INFO).
func Infof(format string, args ...any) { printf(LevelInfo, "INFO", format, args) }

// Tracef reports per-call detail (CECOLL_DEBUG=TRACE).
func Tracef(format string, args ...any) { printf(LevelTrace, "TRACE", format, args) }
