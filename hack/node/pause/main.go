// pause: the pod sandbox's process, as upstream's build/pause/linux/pause.c does it: hold the
// pod's namespaces, reap zombies (it is PID 1 when the pod shares its PID namespace), and exit on
// SIGINT/SIGTERM. Built here because registry.k8s.io/pause cannot be pulled on every machine that
// runs the local node (hack/node/build.sh).
// https://github.com/kubernetes/kubernetes/blob/master/build/pause/linux/pause.c
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
