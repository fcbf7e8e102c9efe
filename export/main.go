package main

// #cgo CFLAGS: -I${SRCDIR}/../include -Wall -Werror
// #include "cshim.h"
import "C"

// main is required by -buildmode=c-shared and never runs.
func main() {}
