package netemu

// sysSetns is setns(2), which package syscall does not name on 386.
const sysSetns = 346
