// Package toolbin keeps the programs the tests build from Go modules at
// pinned versions (versitygw, Jaeger) in one cache outside the repository,
// <user cache>/turnlog/bin: built once per version, by one test binary
// while the others that want it at the same time wait.
package toolbin

import (
	"debug/buildinfo"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Tool is a program built from Module at Version.
type Tool struct {
	// Name is the binary's name in the cache.
	Name    string
	Module  string
	Version string
	// Build builds the binary at bin, in dir (the cache); progress has
	// been told before it is called.
	Build func(dir, bin string) error
	// About is what progress is told before a build: what is built and
	// how long it takes the first time.
	About string
}

// Path returns the cached binary, building it first when it is missing
// or was built from another version.
func (t Tool) Path(progress func(string)) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "turnlog", "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, t.Name)
	if t.Installed(bin) {
		return bin, nil
	}
	// Test binaries of several packages run at once; one builds, the
	// others wait for it and find it built.
	lock, err := os.OpenFile(filepath.Join(dir, t.Name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if t.Installed(bin) {
		return bin, nil
	}
	progress(fmt.Sprintf("%s: %s into %s", t.Name, t.About, dir))
	if err := t.Build(dir, bin); err != nil {
		return "", err
	}
	if !t.Installed(bin) {
		return "", fmt.Errorf("the build did not give %s at %s in %s", t.Module, t.Version, bin)
	}
	return bin, nil
}

// Installed reports whether bin was built with Module at Version, as its
// main module or a dependency.
func (t Tool) Installed(bin string) bool {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return false
	}
	for _, d := range append(info.Deps, &info.Main) {
		if d.Path == t.Module {
			return d.Version == t.Version
		}
	}
	return false
}

// Tail is the last n bytes of a command's output, for an error message.
func Tail(out []byte, n int) string {
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.TrimSpace(string(out))
}
