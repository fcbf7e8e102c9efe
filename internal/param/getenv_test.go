package param

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Directories whose environment reads are not this test's business, with
// hidden ones.
var getenvSkipDirs = map[string]string{
	"internal/param": "the registry itself",
	"build":          "build output (.gitignore)",
}

// Files that may call os.Getenv or os.LookupEnv, and why; even these may
// not name a registered variable or a CECOLL_ one.
var getenvAllowed = map[string]string{
	"export/env.go":                 "copies the C environment into Go's: compares, reads no setting",
	"internal/hip/hiptest/xproc.go": "a test harness's child process learns its role from HIPTEST_CHILD_*: plumbing, not settings",
}

// No package but this one reads a setting from the environment: every
// os.Getenv and os.LookupEnv outside internal/param (and internal/ce, for
// now) is in an allowed file and names no variable of the registry nor any
// CECOLL_ one. Test files may read what they like.
func TestNoGetenvOutsideParam(t *testing.T) {
	root := repoRoot(t)
	registered := map[string]bool{}
	for _, info := range All() {
		registered[info.Name] = true
	}
	fset := token.NewFileSet()
	var calls int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if _, skip := getenvSkipDirs[rel]; skip || (rel != "." && strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		consts := fileConsts(f)
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || !isEnvRead(call) {
				return true
			}
			calls++
			pos := fset.Position(call.Pos())
			where := rel + ":" + strconv.Itoa(pos.Line)
			_, allowed := getenvAllowed[rel]
			require.True(t, allowed, "%s reads the environment: declare the variable in internal/param and call its Get", where)
			if len(call.Args) == 1 {
				if name, known := stringValue(call.Args[0], consts); known {
					require.False(t, registered[name] || strings.HasPrefix(name, "CECOLL_"),
						"%s reads %s: use internal/param", where, name)
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Positive(t, calls, "the walk found the allowed readers")
}

// isEnvRead reports whether call is os.Getenv(...) or os.LookupEnv(...).
func isEnvRead(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "os" && (sel.Sel.Name == "Getenv" || sel.Sel.Name == "LookupEnv")
}

// fileConsts maps the file's string constants to their values.
func fileConsts(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if s, ok := stringValue(vs.Values[i], nil); ok {
						m[name.Name] = s
					}
				}
			}
		}
	}
	return m
}

// stringValue is the value of a string literal, or of a constant of the
// file named by an identifier.
func stringValue(e ast.Expr, consts map[string]string) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		}
	case *ast.Ident:
		s, ok := consts[e.Name]
		return s, ok
	}
	return "", false
}
