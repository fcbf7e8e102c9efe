// Package backend chooses the device runtime the process uses: nvidia, amd
// or the host device, from CECOLL_BACKEND=auto|nvidia|amd|host (unset means
// auto). The choice is made once per process and cached with its error;
// everything above internal/hip gets its hip.Runtime from Open and never
// names a backend.
package backend
