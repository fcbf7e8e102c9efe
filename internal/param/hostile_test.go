package param

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// hostileValues are texts an environment may hold for any variable:
// overflows, non-finite and tiny numbers, signs, suffixes alone, format
// verbs, paths, separators only, invalid UTF-8, control characters and a
// very long value.
var hostileValues = []string{
	"inf", "-inf", "+Inf", "NaN", "nan(0x1)", "1e10", "1e-12", "1e309", "-1e309", "4.9e-324",
	"-1", "-0", "0", "00", "0x", "0x7fffffffffffffff", "-9223372036854775808", "9223372036854775808",
	"18446744073709551615", "18446744073709551616", "99999999999999999999999999999", "1e6", "1000001",
	"K", "M", "G", "1T", "-1K", "0xffffffffffffffffG", "17179869184G", "1.5M", "1_000",
	"%p%h%n%s%x", "%", "../../../../../../etc/passwd", "/dev/null", "/proc/self/mem",
	",", ",,,", "=", "^", "^=", "=,^", "lo,,=lo", "\t \n", "\x00x", "\x7f", "\xff\xfe\xfd",
	"ÿ", "１２３", "true", "yes", "on", "TRACE\n", "host,host,host",
	strings.Repeat("9", 4096), strings.Repeat("a,", 100000),
}

// No value of any variable panics in its parser, and a variable that
// takes bad values with a warning (not Strict) falls back to its default
// with exactly that warning; a strict one reports the value through Err
// for its reader to refuse.
func TestHostileValues(t *testing.T) {
	for _, e := range all {
		info := e.Info()
		t.Run(info.Name, func(t *testing.T) {
			for _, v := range hostileValues {
				warnings := captureWarn(t)
				if !strings.ContainsRune(v, 0) {
					t.Setenv(info.Name, v)
				}
				var got any
				require.NotPanics(t, func() { got = e.getAny() }, "%s=%q", info.Name, v)
				err := e.Err()
				if err != nil && !info.Strict {
					require.Equal(t, e.defaultAny(), got, "%s=%q: a refused value gives the default", info.Name, v)
					require.Len(t, warnings(), 1, "%s=%q: one warning", info.Name, v)
					require.Contains(t, err.Error(), info.Name)
				}
				if err == nil {
					require.Empty(t, warnings(), "%s=%q", info.Name, v)
				}
				require.NotPanics(t, func() { _, _ = e.parseAny(v) }, "%s: Parse(%q)", info.Name, v)
			}
		})
	}
}

// FuzzParse: no text panics any variable's parser; a refused text gives
// the default, an accepted one the same value every time.
func FuzzParse(f *testing.F) {
	for _, v := range hostileValues[:len(hostileValues)-2] {
		f.Add(v)
	}
	for _, v := range []string{"600", "0.5", "32M", "4K", "star", "INFO", "1", "nobatchcopy,noattrs", "=eth0", "^lo"} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, e := range all {
			v, err := e.parseAny(s)
			if err != nil {
				require.Equal(t, e.defaultAny(), v, "%s: Parse(%q) refused", e.Info().Name, s)
				continue
			}
			again, err := e.parseAny(s)
			require.NoError(t, err)
			require.True(t, reflect.DeepEqual(v, again), "%s: Parse(%q) is deterministic", e.Info().Name, s)
		}
	})
}
