//go:build !linux

package natscluster

import "syscall"

// sysProcAttr has nothing to add outside Linux (no parent-death signal).
func sysProcAttr() *syscall.SysProcAttr { return nil }
