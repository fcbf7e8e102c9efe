package comm

// sysMemfdCreate is memfd_create's number on linux/amd64 (package syscall
// does not name it; golang.org/x/sys is not a dependency).
const sysMemfdCreate = 319
