// Command workerprobe is the entrypoint of the e2e suite's probe images on
// the container node. It reports, on stderr (so in `kubectl logs`), what a
// real runtime enforces on a worker container: its user, capabilities,
// no_new_privs and seccomp mode, whether a service-account token is
// mounted, and whether the root filesystem is writable. Then it waits a
// few seconds, so that a spec can act while the pod is Running, and
// replaces itself with /turnlog, so the container's process is the worker.
//
// With --oom first it instead allocates memory until the kernel kills it:
// a worker over its memory limit.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

const tokenPath = "/var/run/secrets/kubernetes.io/serviceaccount/token"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--oom" {
		hog()
	}
	report()
	time.Sleep(5 * time.Second)
	err := syscall.Exec("/turnlog", append([]string{"/turnlog"}, os.Args[1:]...), os.Environ())
	fmt.Fprintln(os.Stderr, "workerprobe: exec /turnlog:", err)
	os.Exit(127)
}

func report() {
	fmt.Fprintf(os.Stderr, "workerprobe: uid=%d gid=%d\n", os.Getuid(), os.Getgid())
	if f, err := os.Open("/proc/self/status"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			key, value, _ := strings.Cut(s.Text(), ":")
			switch key {
			case "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp":
				fmt.Fprintf(os.Stderr, "workerprobe: %s=%s\n", key, strings.TrimSpace(value))
			}
		}
		f.Close()
	}
	if _, err := os.Stat(tokenPath); err == nil {
		fmt.Fprintln(os.Stderr, "workerprobe: service-account token present")
	} else {
		fmt.Fprintln(os.Stderr, "workerprobe: service-account token absent")
	}
	if err := os.WriteFile("/workerprobe-write", []byte("x"), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "workerprobe: write /: %v\n", err)
	} else {
		fmt.Fprintln(os.Stderr, "workerprobe: write /: ok")
	}
}

// hog touches memory a MiB at a time, keeping all of it, up to 4 GiB.
func hog() {
	fmt.Fprintln(os.Stderr, "workerprobe: allocating memory until killed")
	var kept [][]byte
	for i := 0; i < 4096; i++ {
		b := make([]byte, 1<<20)
		for j := range b {
			b[j] = byte(j)
		}
		kept = append(kept, b)
	}
	fmt.Fprintf(os.Stderr, "workerprobe: %d MiB allocated and not killed\n", len(kept))
	os.Exit(1)
}
