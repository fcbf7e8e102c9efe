// The import rules of cecoll's packages, the only file of package internal.
package internal

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// layers are cecoll's packages from the top down (docs/architecture.md). A
// package imports only packages of lower layers: nothing imports upward or
// sideways. A new package goes into this table.
var layers = [][]string{
	{"export", "tools/fwdgen"},
	{"internal/comm"},
	{"internal/ce", "internal/forward", "internal/peermem"},
	{"internal/hip/backend", "internal/bootstrap"},
	{"internal/hip/host", "internal/hip/nvidia", "internal/hip/amd", "internal/hip/hiptest", "internal/testutil"},
	{"internal/result"},
	{"internal/hip"},
	{"internal/log"},
	{"internal/param", "internal/memfd", "internal/osthread"},
}

// importers narrows who may import a package, beyond the layers: export
// reaches the engine, the bootstrap and peers' memory only through
// internal/comm, the backends are chosen only by internal/hip/backend, and
// the conformance suite and testutil serve tests.
var importers = map[string][]string{
	"internal/ce":          {"internal/comm"},
	"internal/bootstrap":   {"internal/comm", "internal/peermem"},
	"internal/peermem":     {"internal/comm"},
	"internal/hip/host":    {"internal/hip/backend"},
	"internal/hip/nvidia":  {"internal/hip/backend"},
	"internal/hip/amd":     {"internal/hip/backend"},
	"internal/hip/hiptest": {},
	"internal/testutil":    {},
}

// cgo is the C surface, the backends and the forward layer's only.
var cgoPackages = []string{"export", "internal/hip/nvidia", "internal/hip/amd", "internal/hip/host", "internal/forward"}

// Loading a library at run time (purego, dlopen, dlsym) is the GPU
// backends' and the forward layer's: internal/forward and export's
// forward.c, which loads for it.
var loaders = []string{"internal/hip/nvidia", "internal/hip/amd", "internal/forward", "export/forward.c"}

// The packages export calls take Go values: export decodes the C structs
// (ncclConfig_t, ncclCeCollArgs), so their exported functions take no
// unsafe.Pointer, but for ncclGroupSimulateEnd's ncclSimInfo_t, which goes
// unread to the real library.
var goValues = []string{"internal/comm", "internal/ce"}
var opaque = []string{"internal/comm.GroupSimulateEnd"}

var dlCall = regexp.MustCompile(`\bdl(m?open|v?sym)\s*\(`)

// cComment matches C comments, so that text about dlopen is not a call.
var cComment = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)

// TestImportRules holds the rules above over every non-test file of the
// module: what the library is built from (tests may drive upper layers).
func TestImportRules(t *testing.T) {
	rank := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			rank[p] = i
		}
	}
	pkgs := readModule(t, "..")
	require := func(ok bool, format string, args ...any) {
		if !ok {
			t.Errorf(format, args...)
		}
	}
	for _, p := range pkgs {
		r, known := rank[p.dir]
		require(known, "%s: not in the layers of internal/imports_test.go: place it", p.dir)
		if !known {
			continue
		}
		for _, imp := range p.imports {
			ri, ok := rank[imp.pkg]
			require(ok && ri > r, "%s: %s imports %s, which is not below it", p.dir, imp.file, imp.pkg)
			if allowed, narrowed := importers[imp.pkg]; narrowed {
				require(slices.Contains(allowed, p.dir), "%s: %s imports %s, which only %v may import", p.dir, imp.file, imp.pkg, allowed)
			}
		}
		for _, f := range p.cgo {
			require(slices.Contains(cgoPackages, p.dir), "%s: %s uses cgo; only %v may", p.dir, f, cgoPackages)
		}
		for _, fn := range p.takesPointer {
			require(!slices.Contains(goValues, p.dir) || slices.Contains(opaque, p.dir+"."+fn),
				"%s: %s takes an unsafe.Pointer: export decodes C memory and passes Go values down", p.dir, fn)
		}
		for _, f := range p.loads {
			require(slices.Contains(loaders, p.dir) || slices.Contains(loaders, filepath.ToSlash(filepath.Join(p.dir, f))),
				"%s: %s loads libraries (purego, dlopen, dlsym); only %v may", p.dir, f, loaders)
		}
	}
	require(len(pkgs) >= 10, "read only %d packages: is the module at ..?", len(pkgs))
}

type pkgFacts struct {
	dir     string // relative to the module root
	imports []struct{ file, pkg string }
	cgo     []string // files that import "C"
	loads   []string // files that load libraries
	// takesPointer are the exported functions with an unsafe.Pointer
	// parameter.
	takesPointer []string
}

// readModule reads the imports, cgo use and library loading of every
// package of the module at root (nested modules and testdata left out).
func readModule(t *testing.T, root string) []pkgFacts {
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	prefix := strings.Fields(strings.SplitN(string(mod), "\n", 2)[0])[1] + "/"
	var pkgs []pkgFacts
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if rel != "." {
			if name == "testdata" || name == "build" || strings.HasPrefix(name, ".") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
		}
		p, err := readPackage(path, rel, prefix)
		if err == nil && p != nil {
			pkgs = append(pkgs, *p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

func readPackage(path, rel, prefix string) (*pkgFacts, error) {
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	p := pkgFacts{dir: rel}
	hasGo := false
	for _, e := range entries {
		name := e.Name()
		file := filepath.Join(path, name)
		switch ext := filepath.Ext(name); {
		case e.IsDir() || strings.HasSuffix(name, "_test.go"):
		case ext == ".go":
			hasGo = true
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
			if err != nil {
				return nil, err
			}
			for _, d := range f.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.IsExported() && takesPointer(fn.Type.Params) {
					p.takesPointer = append(p.takesPointer, fn.Name.Name)
				}
				decl, ok := d.(*ast.GenDecl)
				if !ok || decl.Tok != token.IMPORT {
					continue
				}
				for _, s := range decl.Specs {
					spec := s.(*ast.ImportSpec)
					imp, _ := strconv.Unquote(spec.Path.Value)
					switch {
					case imp == "C":
						p.cgo = append(p.cgo, name)
						preamble := decl.Doc.Text() + spec.Doc.Text()
						if dlCall.MatchString(cComment.ReplaceAllString(preamble, "")) {
							p.loads = append(p.loads, name)
						}
					case imp == "github.com/ebitengine/purego":
						p.loads = append(p.loads, name)
					case strings.HasPrefix(imp, prefix):
						p.imports = append(p.imports, struct{ file, pkg string }{name, strings.TrimPrefix(imp, prefix)})
					}
				}
			}
		case ext == ".c" || ext == ".h" || ext == ".S":
			src, err := os.ReadFile(file)
			if err != nil {
				return nil, err
			}
			if dlCall.Match(cComment.ReplaceAll(src, nil)) {
				p.loads = append(p.loads, name)
			}
		}
	}
	if !hasGo {
		return nil, nil
	}
	return &p, nil
}

// takesPointer reports whether a parameter's type mentions unsafe.Pointer.
func takesPointer(params *ast.FieldList) bool {
	found := false
	for _, f := range params.List {
		ast.Inspect(f.Type, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Pointer" {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "unsafe" {
					found = true
				}
			}
			return !found
		})
	}
	return found
}
