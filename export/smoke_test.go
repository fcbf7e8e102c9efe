package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestSmoke builds libcecoll.so with the version script, then compiles
// testdata/smoke.c against include/ with -Wall -Werror and runs it on the
// host device: init of 3 ranks (InitAll with a repeated device, grouped
// InitRank), the four collectives, the handle registry and error texts.
// It also checks that exactly the names of exports.map are exported.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the shared library")
	}
	for _, tool := range []string{"gcc", "nm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found", tool)
		}
	}
	dir := t.TempDir()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libcecoll.so")
	run := func(env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(nil, "go", "build", "-buildmode=c-shared", "-o", lib,
		"-ldflags", "-extldflags -Wl,--version-script="+filepath.Join(wd, "exports.map"), ".")
	bin := filepath.Join(dir, "smoke")
	run(nil, "gcc", "-Wall", "-Werror", "-I"+filepath.Join(wd, "..", "include"), "-o", bin,
		filepath.Join(wd, "testdata", "smoke.c"), "-L"+dir, "-lcecoll", "-Wl,-rpath,"+dir)
	out := run([]string{"CECOLL_BACKEND=host", "CECOLL_DEBUG=NONE"}, bin)
	if !strings.Contains(out, "smoke: all passed") {
		t.Fatalf("smoke:\n%s", out)
	}

	want := mapNames(t, filepath.Join(wd, "exports.map"))
	var got []string
	for _, line := range strings.Split(run(nil, "nm", "-D", "--defined-only", lib), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[1] != "A" {
			got = append(got, strings.SplitN(f[2], "@", 2)[0])
		}
	}
	sort.Strings(got)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("exported symbols differ from exports.map\n got: %v\nwant: %v", got, want)
	}
}

// mapNames reads the global names of a version script.
func mapNames(t *testing.T, path string) []string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	global := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		s := strings.TrimSpace(sc.Text())
		switch {
		case s == "global:":
			global = true
		case s == "local:":
			global = false
		case global && strings.HasSuffix(s, ";"):
			names = append(names, strings.TrimSuffix(s, ";"))
		}
	}
	sort.Strings(names)
	return names
}
