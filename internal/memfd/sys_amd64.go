package memfd

// sysMemfdCreate is memfd_create's number on linux/amd64.
const sysMemfdCreate = 319
