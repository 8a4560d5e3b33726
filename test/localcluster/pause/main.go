// Command pause is the entrypoint of the local cluster's sandbox (pause)
// image: it holds a pod's namespaces open until the kubelet stops the
// sandbox, reaping any child it inherits as PID 1 of a shared PID
// namespace.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
