package natscluster

import "syscall"

// sysProcAttr makes the kernel SIGKILL a node when the process that started
// it dies, so a crashed or killed test leaves no nats-server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
