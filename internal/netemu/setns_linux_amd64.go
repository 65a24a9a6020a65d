package netemu

// sysSetns is setns(2), which package syscall does not name on amd64.
const sysSetns = 308
