package forward

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"cecoll/internal/log"
	"cecoll/internal/param"
	"cecoll/internal/result"
)

// Loader is the dynamic loader as export/ reaches it.
type Loader interface {
	// Self is the path of cecoll's own file.
	Self() string
	// Next binds the real library that follows cecoll in the lookup order
	// (dlsym(RTLD_NEXT)): the one the program linked, cecoll preloaded.
	// nil, nil when there is none.
	Next() (Lib, error)
	// Open loads path with RTLD_LOCAL|RTLD_DEEPBIND|RTLD_NODELETE and binds
	// it; it refuses cecoll itself.
	Open(path string) (Lib, error)
	// Objects lists the paths of the objects loaded in the process.
	Objects() []string
}

// Load finds the real library, in the order docs/forward.md ("Which real
// library") gives, and installs it:
//  1. CECOLL_NCCL_LIB (a path; failing to load it is an error for every
//     communicator, never a quiet fallback);
//  2. the library after cecoll in the lookup order: cecoll preloaded in
//     front of the NCCL or RCCL the program linked; else a loaded object
//     named libnccl.so.* or librccl.so.* that is not cecoll (the program
//     loaded it in a local scope, as torch does);
//  3. where cecoll's own file is libnccl.so.* or librccl.so.* (installed
//     in place of the real library), a file of that name on the
//     loader's path (LD_LIBRARY_PATH, then the system's directories) and
//     in torch's wheel (nvidia/nccl/lib, or torch/lib for RCCL), never
//     cecoll's own file.
//
// None: CE only. It logs what it found (INFO) or why not (WARN).
func Load(l Loader) (Lib, error) {
	lib, err := find(l)
	switch {
	case err != nil:
		log.Warnf("forward: %v", err)
	case lib != nil:
		log.Infof(log.Init, "forward: real library %s (version %d): cecoll routes what copy engines run by CECOLL_ROUTE=%s and forwards the rest",
			lib.Name(), lib.Version(), param.Route.Get())
	default:
		log.Infof(log.Init, "forward: no real NCCL or RCCL: copy engines only")
	}
	Install(lib, err)
	return lib, err
}

func find(l Loader) (Lib, error) {
	if p := param.NCCLLib.Get(); p != "" {
		lib, err := l.Open(p)
		if err != nil {
			return nil, result.Errorf(result.SystemError, "CECOLL_NCCL_LIB=%s: %w", p, err)
		}
		return lib, nil
	}
	if lib, err := l.Next(); lib != nil || err != nil {
		if err != nil {
			return nil, result.Errorf(result.SystemError, "the NCCL after cecoll in the lookup order: %w", err)
		}
		return lib, nil
	}
	self := l.Self()
	// Loaded, but not after cecoll in the lookup order: the program loaded
	// it in a scope of its own (torch's Python extension brings
	// libtorch_cuda.so, and with it libnccl.so.2, in RTLD_LOCAL), while
	// cecoll, preloaded, still takes its calls.
	for _, path := range l.Objects() {
		if InPlaceName(filepath.Base(path)) == "" || sameFile(path, self) {
			continue
		}
		lib, err := l.Open(path)
		if err != nil {
			return nil, result.Errorf(result.SystemError, "the loaded %s: %w", path, err)
		}
		return lib, nil
	}
	name := InPlaceName(filepath.Base(self))
	if name == "" {
		return nil, nil
	}
	var errs []error
	for _, path := range Candidates(name, param.LDLibraryPath.Get(), l.Objects()) {
		if sameFile(path, self) {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			continue
		}
		lib, err := l.Open(path)
		if err == nil {
			return lib, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", path, err))
	}
	if len(errs) > 0 {
		return nil, result.Errorf(result.SystemError, "cecoll sits in place of %s but no real one loaded: %w", name, errors.Join(errs...))
	}
	log.Warnf("forward: cecoll sits in place of %s (%s) but found no real one on the loader's path or in torch's wheel: copy engines only", name, self)
	return nil, nil
}

// InPlaceName is the real library's name when cecoll's own file has it
// (libnccl.so.2 or librccl.so.1, any suffix), else "".
func InPlaceName(base string) string {
	switch {
	case strings.HasPrefix(base, "libnccl.so"):
		return "libnccl.so.2"
	case strings.HasPrefix(base, "librccl.so"):
		return "librccl.so.1"
	}
	return ""
}

// Candidates lists where the real library called name may be, in order:
// the directories of ldPath, the system's library directories, then
// torch's wheel next to any loaded object of torch/lib.
func Candidates(name, ldPath string, objects []string) []string {
	var dirs []string
	for _, d := range strings.Split(ldPath, ":") {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	if triplet != "" {
		dirs = append(dirs, "/lib/"+triplet, "/usr/lib/"+triplet)
	}
	dirs = append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib", "/opt/rocm/lib", "/usr/local/cuda/lib64")
	for _, o := range objects {
		torchLib := filepath.Dir(o)
		if filepath.Base(torchLib) != "lib" || filepath.Base(filepath.Dir(torchLib)) != "torch" {
			continue
		}
		site := filepath.Dir(filepath.Dir(torchLib))
		if name == "librccl.so.1" {
			dirs = append(dirs, torchLib)
		} else {
			dirs = append(dirs, filepath.Join(site, "nvidia", "nccl", "lib"))
		}
	}
	seen := map[string]bool{}
	var out []string
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// sameFile reports whether a and b are one file (links included).
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}
