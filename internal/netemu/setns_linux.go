//go:build linux && !amd64 && !386

package netemu

import "syscall"

const sysSetns = syscall.SYS_SETNS
