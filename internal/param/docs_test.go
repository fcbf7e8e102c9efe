package param

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repoRoot is the module's root, found from this package's directory.
func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		require.NotEqual(t, dir, up, "go.mod not found")
		dir = up
	}
}

// table returns the cells of the body rows of the first table after the
// line heading.
func table(t *testing.T, text, heading string) [][]string {
	text = "\n" + text // a heading may open the file
	i := strings.Index(text, "\n"+heading+"\n")
	require.GreaterOrEqual(t, i, 0, "heading %q not found", heading)
	var rows [][]string
	for _, line := range strings.Split(text[i+len(heading)+2:], "\n") {
		if !strings.HasPrefix(line, "|") {
			if len(rows) > 0 || strings.HasPrefix(line, "#") {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows = append(rows, cells)
	}
	require.Greater(t, len(rows), 2, "no table under %q", heading)
	return rows[2:] // the header and the rule
}

// varName matches a variable in a table's first cell: `NAME` or
// `NAME=value`.
var varName = regexp.MustCompile("`([A-Z][A-Z0-9_]*)(?:=[^`]*)?`")

// checkRows checks that every row of a table names only parameters of
// class, each with its default in the second column, and returns the
// names it listed.
func checkRows(t *testing.T, rows [][]string, class Class, where string) map[string]bool {
	byName := map[string]Info{}
	for _, info := range All() {
		byName[info.Name] = info
	}
	listed := map[string]bool{}
	for _, row := range rows {
		require.GreaterOrEqual(t, len(row), 3, "%s: row %q", where, row)
		names := varName.FindAllStringSubmatch(row[0], -1)
		require.NotEmpty(t, names, "%s: row %q names no variable", where, row)
		for _, m := range names {
			name := m[1]
			info, ok := byName[name]
			require.True(t, ok, "%s lists %s, which internal/param does not declare", where, name)
			require.Equal(t, class, info.Class, "%s lists %s, a %v parameter", where, name, info.Class)
			require.Equal(t, info.Default, strings.ReplaceAll(row[1], "`", ""), "%s: default of %s", where, name)
			listed[name] = true
		}
	}
	return listed
}

// checkTable checks that a table lists exactly the parameters of class,
// each with its default in the second column.
func checkTable(t *testing.T, rows [][]string, class Class, where string) {
	listed := checkRows(t, rows, class, where)
	for _, info := range All() {
		if info.Class == class {
			require.True(t, listed[info.Name], "%s does not list %s (%s)", where, info.Name, info.Doc)
		}
	}
}

// readDoc returns a file of the repository as text.
func readDoc(t *testing.T, path ...string) string {
	b, err := os.ReadFile(filepath.Join(append([]string{repoRoot(t)}, path...)...))
	require.NoError(t, err)
	return string(b)
}

// docs/environment.md's tables hold the User and Host parameters with
// their defaults, and no Tuning knob.
func TestEnvironmentDoc(t *testing.T) {
	text := readDoc(t, "docs", "environment.md")
	checkTable(t, table(t, text, "## What a user sets"), User, `docs/environment.md's "What a user sets"`)
	checkTable(t, table(t, text, "## The host device"), Host, `docs/environment.md's "The host device"`)
}

// README's short list names a few User parameters, each declared and with
// its default; the full table is docs/environment.md's.
func TestReadmeEnvironment(t *testing.T) {
	rows := table(t, readDoc(t, "README.md"), "## Environment variables")
	listed := checkRows(t, rows, User, `README's "Environment variables"`)
	require.NotEmpty(t, listed)
}

// docs/tuning.md's table is the registry's text for the Tuning parameters.
func TestTuningDoc(t *testing.T) {
	rows := table(t, readDoc(t, "docs", "tuning.md"), "# Tuning knobs (for tests and cecoll-perf)")
	var want [][]string
	for _, info := range All() {
		if info.Class == Tuning {
			want = append(want, []string{"`" + info.Name + "`", info.Default, info.Accepts, info.Doc})
		}
	}
	for i := range max(len(rows), len(want)) {
		require.Less(t, i, len(want), "docs/tuning.md: row %q is no Tuning parameter", rows[min(i, len(rows)-1)])
		require.Less(t, i, len(rows), "docs/tuning.md lacks the row\n%s", "| "+strings.Join(want[i], " | ")+" |")
		require.Equal(t, want[i], rows[i], "docs/tuning.md row %d; want\n%s", i, "| "+strings.Join(want[i], " | ")+" |")
	}
}
