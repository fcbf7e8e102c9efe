// Package nvidia is the NVIDIA backend of the device runtime: it implements
// hip.Runtime over the CUDA driver API of libcuda.so.1, loaded at run time
// through purego (no CUDA at build time, no libcudart).
//
// What it owns:
//   - the one symbol table of libcuda entry points (symbols.go), each with its
//     C prototype, under the versioned names cuda.h maps to (_v2 ...);
//   - primary-context handling: SetDevice makes a device's primary context
//     current on the calling OS thread, and every call that needs a context
//     gives the thread device 0's when it has none;
//   - VMM memory (cuMemCreate + reserve + map + access for every peer), POSIX
//     fd export/import, and the table of those allocations;
//   - PointerInfo: the table for its own memory, cuPointerGetAttributes for
//     the rest (pointer.go), mincore for what the driver does not know;
//   - the launch path (StreamBatchMemOp, MemcpyBatchAsync, MemcpyAsync,
//     EventRecord, StreamWaitEvent, StreamGetCaptureStatus, SetDevice): one
//     call through a 9-word cgo trampoline (ccall.go, the cheapest mechanism
//     measured), no Go allocation, slices passed straight through (hip.MemOp
//     and hip.CopyAttributes already have the driver's layout). Other calls
//     go through purego.SyscallN, which keeps the Go pointers it is given
//     alive.
//
// Multicast is never bound: cuMulticast* calls are forbidden on the GPU
// machines cecoll is tested on, so Caps().Multicast is false and
// MulticastCreate returns hip.ErrNotSupported.
package nvidia
