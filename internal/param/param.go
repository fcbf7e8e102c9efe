package param

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Class says where a parameter is documented.
type Class int

const (
	// User parameters are docs/environment.md's "What a user sets".
	User Class = iota + 1
	// Tuning parameters are docs/tuning.md: knobs for tests and cecoll-perf,
	// absent from the user's table.
	Tuning
	// Host parameters configure the host device: docs/environment.md's
	// "The host device".
	Host
)

func (c Class) String() string {
	switch c {
	case User:
		return "user"
	case Tuning:
		return "tuning"
	case Host:
		return "host"
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// Info describes a parameter for documentation and tests.
type Info struct {
	Name    string
	Class   Class
	Default string   // the default as the documentation writes it
	Accepts string   // the values accepted
	Choices []string // the words accepted, for a choice or a list
	Doc     string   // one line
	Strict  bool     // a bad value is refused by the reader (Err), not replaced
}

// reading is one parse of the variable's text.
type reading[T any] struct {
	raw   string
	blank bool // unset or only spaces: the default, silently
	val   T
	err   error
}

// Param is one environment variable with a value of type T.
type Param[T any] struct {
	info     Info
	def      T
	parse    func(string) (T, error) // gets trimmed, non-blank text
	fallback *Param[T]               // read when this one is blank
	// realOwns: the fallback (an NCCL_ variable) belongs to the real
	// library while one is loaded (SetForwarding), and is then not read.
	realOwns bool

	mu     sync.Mutex // serialises parsing, so a warning is given once
	warned bool
	cur    atomic.Pointer[reading[T]]
}

// entry is what the registry needs of a Param of any type.
type entry interface {
	Info() Info
	reset()
	// Untyped Get, Err and Parse, for tests over every parameter.
	getAny() any
	Err() error
	parseAny(s string) (any, error)
	defaultAny() any
}

// all lists the parameters in declaration order (params.go).
var all []entry

func register[T any](p *Param[T]) *Param[T] {
	all = append(all, p)
	return p
}

// All lists every parameter, in declaration order.
func All() []Info {
	out := make([]Info, len(all))
	for i, e := range all {
		out[i] = e.Info()
	}
	return out
}

// Reset forgets every value parsed and every warning given, so that the
// next Get reads the environment again and warns again. For tests: Get
// already follows t.Setenv, Reset only re-arms the once-per-process warning.
func Reset() {
	for _, e := range all {
		e.reset()
	}
}

func (p *Param[T]) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur.Store(nil)
	p.warned = false
}

// Info describes the parameter.
func (p *Param[T]) Info() Info { return p.info }

func (p *Param[T]) getAny() any { return p.Get() }

func (p *Param[T]) parseAny(s string) (any, error) { return p.Parse(s) }

func (p *Param[T]) defaultAny() any { return p.def }

// Name is the variable's name.
func (p *Param[T]) Name() string { return p.info.Name }

// Default is the value used when the variable is blank or bad.
func (p *Param[T]) Default() T { return p.def }

// Get returns the variable's value: the default when it is blank (or, for a
// variable with a fallback, the fallback's value) or does not parse.
func (p *Param[T]) Get() T {
	r := p.read()
	if r.blank && p.falls() {
		return p.fallback.Get()
	}
	return r.val
}

// falls reports whether a blank value stands for the fallback's.
func (p *Param[T]) falls() bool {
	return p.fallback != nil && !(p.realOwns && forwarding.Load())
}

// From names the variable whose text Get's value came from: this one, its
// fallback, or "" for the default (of a blank or bad value).
func (p *Param[T]) From() string {
	r := p.read()
	switch {
	case r.blank && p.falls():
		return p.fallback.From()
	case r.blank || r.err != nil:
		return ""
	}
	return p.info.Name
}

// IsSet reports whether the variable holds a non-blank value (good or bad).
func (p *Param[T]) IsSet() bool { return !p.read().blank }

// Err returns why the value Get returns was not taken from the text (Get
// returned the default), or nil; for a blank variable, its fallback's.
func (p *Param[T]) Err() error {
	r := p.read()
	if r.blank && p.falls() {
		return p.fallback.Err()
	}
	return r.err
}

// Parse parses s as the variable would be: blank gives the default. The
// error names the variable and the value.
func (p *Param[T]) Parse(s string) (T, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return p.def, nil
	}
	v, err := p.parse(t)
	if err != nil {
		return p.def, fmt.Errorf("%s=%q: %w", p.info.Name, s, err)
	}
	return v, nil
}

func (p *Param[T]) read() *reading[T] {
	// Unset reads as "": the same reading as set and empty.
	raw := os.Getenv(p.info.Name)
	if r := p.cur.Load(); r != nil && r.raw == raw {
		return r
	}
	p.mu.Lock()
	if r := p.cur.Load(); r != nil && r.raw == raw {
		p.mu.Unlock()
		return r
	}
	r := &reading[T]{raw: raw, blank: strings.TrimSpace(raw) == ""}
	r.val, r.err = p.Parse(raw)
	p.cur.Store(r)
	first := r.err != nil && !p.info.Strict && !p.warned
	p.warned = p.warned || first
	p.mu.Unlock()
	// Outside the lock: the receiver (the log) may read parameters itself.
	if first {
		warn(fmt.Sprintf("%v; using the default %s", r.err, p.info.Default))
	}
	return r
}

// strictly marks a parameter whose reader refuses a bad value (Err).
func (p *Param[T]) strictly() *Param[T] {
	p.info.Strict = true
	return p
}

// orElse makes Get read f when this variable is blank.
func (p *Param[T]) orElse(f *Param[T]) *Param[T] {
	p.fallback = f
	return p
}

// unlessForwarding stops the fallback from standing in while a real NCCL
// or RCCL is loaded: that NCCL_ variable is then the real library's.
func (p *Param[T]) unlessForwarding() *Param[T] {
	p.realOwns = true
	return p
}

// shown sets the default as the documentation writes it.
func (p *Param[T]) shown(text string) *Param[T] {
	p.info.Default = text
	return p
}

// forwarding: a real NCCL or RCCL is loaded (SetForwarding).
var forwarding atomic.Bool

// SetForwarding tells the registry whether a real NCCL or RCCL is loaded
// (internal/forward, once, at the first call); the NCCL_ variables that
// library owns then stop standing in for their CECOLL_ twins.
func SetForwarding(on bool) { forwarding.Store(on) }

// warnTo receives the warnings; nil: stderr.
var warnTo atomic.Pointer[func(string)]

// SetWarn routes warnings about bad values to f (nil: stderr) and returns
// the previous receiver. internal/log sets it when it is set up; tests
// capture warnings with it.
func SetWarn(f func(msg string)) (prev func(msg string)) {
	var np *func(string)
	if f != nil {
		np = &f
	}
	if old := warnTo.Swap(np); old != nil {
		return *old
	}
	return nil
}

// warn writes msg in log's format, less the thread id, until the log takes
// over.
func warn(msg string) {
	if f := warnTo.Load(); f != nil {
		(*f)(msg)
		return
	}
	host, _ := os.Hostname()
	fmt.Fprintf(os.Stderr, "%s:%d cecoll WARN %s\n", host, os.Getpid(), msg)
}

// The parameter kinds. Each builds its parser and the documentation's
// default and accepted values.

// integer is what a byte-size or count parameter may hold.
type integer interface {
	~int | ~int64 | ~uint64 | ~uintptr
}

// newBytes is a non-negative integer in [lo, hi] with an optional K, M or
// G suffix (powers of 1024): sizes, and counts that read well as sizes.
func newBytes[T integer](name string, class Class, def, lo, hi T, doc string) *Param[T] {
	return register(&Param[T]{
		info: Info{Name: name, Class: class, Default: formatBytes(uint64(def)),
			Accepts: formatBytes(uint64(lo)) + ".." + formatBytes(uint64(hi)) + " (K, M, G suffixes)", Doc: doc},
		def: def,
		parse: func(s string) (T, error) {
			v, err := parseBytes(s)
			if err != nil || v < uint64(lo) || v > uint64(hi) {
				return def, fmt.Errorf("want an integer in %s..%s, K, M or G suffix allowed", formatBytes(uint64(lo)), formatBytes(uint64(hi)))
			}
			return T(v), nil
		},
	})
}

// parseBytes reads an unsigned integer (decimal, or 0x/0o/0b) with an
// optional K, M or G suffix, either case.
func parseBytes(s string) (uint64, error) {
	shift := 0
	switch s[len(s)-1] {
	case 'k', 'K':
		shift = 10
	case 'm', 'M':
		shift = 20
	case 'g', 'G':
		shift = 30
	}
	if shift != 0 {
		s = strings.TrimSpace(s[:len(s)-1])
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return 0, err
	}
	if v > math.MaxUint64>>shift {
		return 0, strconv.ErrRange
	}
	return v << shift, nil
}

// formatBytes writes v with the largest suffix that divides it.
func formatBytes(v uint64) string {
	switch {
	case v >= 1<<30 && v%(1<<30) == 0:
		return strconv.FormatUint(v>>30, 10) + "G"
	case v >= 1<<20 && v%(1<<20) == 0:
		return strconv.FormatUint(v>>20, 10) + "M"
	case v >= 1<<10 && v%(1<<10) == 0:
		return strconv.FormatUint(v>>10, 10) + "K"
	}
	return strconv.FormatUint(v, 10)
}

// newInt is a signed integer in [lo, hi] (decimal, or 0x/0o/0b).
func newInt[T ~int | ~int64](name string, class Class, def, lo, hi T, accepts, doc string) *Param[T] {
	return register(&Param[T]{
		info: Info{Name: name, Class: class, Default: strconv.FormatInt(int64(def), 10), Accepts: accepts, Doc: doc},
		def:  def,
		parse: func(s string) (T, error) {
			v, err := strconv.ParseInt(s, 0, 64)
			if err != nil || v < int64(lo) || v > int64(hi) {
				return def, errors.New("want " + accepts)
			}
			return T(v), nil
		},
	})
}

// Seconds are accepted from 1 ms to 1e6 s (11.6 days): the bounds keep
// every product with time.Second inside time.Duration, and keep a zero or
// negative wait (a ticker of zero period panics) from ever being built.
const (
	minSeconds = 1e-3
	maxSeconds = 1e6
)

// newSeconds is a duration written in seconds, fractions allowed.
func newSeconds(name string, class Class, def time.Duration, doc string) *Param[time.Duration] {
	return register(&Param[time.Duration]{
		info: Info{Name: name, Class: class, Default: strconv.FormatFloat(def.Seconds(), 'g', -1, 64),
			Accepts: "seconds, 0.001..1e6", Doc: doc},
		def: def,
		parse: func(s string) (time.Duration, error) {
			f, err := strconv.ParseFloat(s, 64)
			// The negated test also refuses NaN.
			if err != nil || !(f >= minSeconds && f <= maxSeconds) {
				return def, errors.New("want seconds from 0.001 to 1e6")
			}
			return time.Duration(f * float64(time.Second)), nil
		},
	})
}

// newChoice is one of choices, matched in any case; Get returns the
// spelling of choices.
func newChoice(name string, class Class, def string, choices []string, doc string) *Param[string] {
	return register(&Param[string]{
		info: Info{Name: name, Class: class, Default: def, Accepts: strings.Join(choices, ", "), Choices: choices, Doc: doc},
		def:  def,
		parse: func(s string) (string, error) {
			for _, c := range choices {
				if strings.EqualFold(s, c) {
					return c, nil
				}
			}
			return def, errors.New("want one of " + strings.Join(choices, ", "))
		},
	})
}

// newBool is 0 or 1.
func newBool(name string, class Class, def bool, doc string) *Param[bool] {
	text := "0"
	if def {
		text = "1"
	}
	return register(&Param[bool]{
		info: Info{Name: name, Class: class, Default: text, Accepts: "0, 1", Doc: doc},
		def:  def,
		parse: func(s string) (bool, error) {
			switch s {
			case "0":
				return false, nil
			case "1":
				return true, nil
			}
			return def, errors.New("want 0 or 1")
		},
	})
}

// newString is free text, trimmed; its default is "" and defText says
// what "" means.
func newString(name string, class Class, defText, accepts, doc string) *Param[string] {
	return register(&Param[string]{
		info:  Info{Name: name, Class: class, Default: defText, Accepts: accepts, Doc: doc},
		parse: func(s string) (string, error) { return s, nil },
	})
}

// newList is a comma-separated list of words from choices, in any case;
// Get returns them lower-cased, blanks dropped, in a slice shared by every
// caller (read-only). The default is none.
func newList(name string, class Class, choices []string, doc string) *Param[[]string] {
	return register(&Param[[]string]{
		info: Info{Name: name, Class: class, Default: "none", Accepts: "comma list of " + strings.Join(choices, ", "), Choices: choices, Doc: doc},
		parse: func(s string) ([]string, error) {
			var words []string
			for _, w := range strings.Split(s, ",") {
				w = strings.ToLower(strings.TrimSpace(w))
				if w == "" {
					continue
				}
				known := false
				for _, c := range choices {
					known = known || w == c
				}
				if !known {
					return nil, fmt.Errorf("unknown word %q (known: %s)", w, strings.Join(choices, ", "))
				}
				words = append(words, w)
			}
			return words, nil
		},
	})
}

// newMask is a comma list of names (any case) made into a bit mask, bit
// i for names[i], as NCCL reads NCCL_DEBUG_SUBSYS: ALL names every bit,
// and a leading ^ starts from every bit and clears the names. The
// default is every bit.
func newMask(name string, class Class, names []string, doc string) *Param[uint64] {
	all := uint64(1)<<len(names) - 1
	return register(&Param[uint64]{
		info: Info{Name: name, Class: class, Default: "ALL", Accepts: "comma list of " + strings.Join(names, ", ") + ", ALL; a leading ^ excludes them",
			Choices: names, Doc: doc},
		def: all,
		parse: func(s string) (uint64, error) {
			var mask uint64
			invert := strings.HasPrefix(s, "^")
			if invert {
				s, mask = s[1:], all
			}
			for _, w := range strings.Split(s, ",") {
				w = strings.TrimSpace(w)
				if w == "" {
					continue
				}
				bit := uint64(0)
				if strings.EqualFold(w, "ALL") {
					bit = all
				}
				for i, n := range names {
					if strings.EqualFold(w, n) {
						bit = 1 << i
					}
				}
				if bit == 0 {
					return all, fmt.Errorf("unknown name %q (known: %s, ALL)", w, strings.Join(names, ", "))
				}
				if invert {
					mask &^= bit
				} else {
					mask |= bit
				}
			}
			return mask, nil
		},
	})
}

// newAddress is a bootstrap address as NCCL_COMM_ID writes it:
// host:port or [ipv6]:port, the host a name or a literal address.
func newAddress(name string, class Class, doc string) *Param[string] {
	return register(&Param[string]{
		info: Info{Name: name, Class: class, Default: "unset", Accepts: "host:port or [ipv6]:port", Doc: doc},
		parse: func(s string) (string, error) {
			host, port, err := net.SplitHostPort(s)
			if err != nil || host == "" || strings.ContainsAny(host, " \t/") {
				return "", errors.New("want host:port or [ipv6]:port")
			}
			if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
				return "", errors.New("want a port in 1..65535")
			}
			return s, nil
		},
	})
}
