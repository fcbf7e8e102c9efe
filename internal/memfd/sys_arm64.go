package memfd

// sysMemfdCreate is memfd_create's number on linux/arm64.
const sysMemfdCreate = 279
