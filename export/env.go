package main

/*
#include <stdlib.h>
#include "cshim.h"
extern char** environ;
static inline char* env_at(int i) { return environ[i]; }
*/
import "C"

import (
	"os"
	"strings"

	"cecoll/internal/forward"
	"cecoll/internal/log"
	"cecoll/internal/osthread"
)

// threadID is gettid, cached in C thread-local storage (thread.c).
func threadID() int { return int(C.xgettid()) }

// goexp_cecollSyncEnv copies the C library's environment into the Go
// runtime's, once, before the first call reaches Go (api.c). A Go shared
// library starts with the environment the process had at exec, so a
// variable the application set later (Python's os.environ, setenv in C)
// would otherwise never reach cecoll's settings. Later changes are not
// seen, as with NCCL, which reads its variables once. Thread ids come
// from thread.c's cache from then on. The log is then set up, so that a
// bad value of any variable (internal/param) is reported through it, the
// version banner printed (NCCL_DEBUG=VERSION), and the real NCCL or RCCL
// looked for (forward mode).
//
//export goexp_cecollSyncEnv
func goexp_cecollSyncEnv() {
	osthread.UseCache(threadID)
	for i := 0; ; i++ {
		p := C.env_at(C.int(i))
		if p == nil {
			break
		}
		k, v, ok := strings.Cut(C.GoString(p), "=")
		if !ok || k == "" {
			continue
		}
		if cur, set := os.LookupEnv(k); !set || cur != v {
			os.Setenv(k, v)
		}
	}
	log.Setup()
	log.Banner(banner())
	forward.Load(loader{})
}
