//go:build unix

package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// withFDs calls fn with the descriptors of the directories ds.
func withFDs(fn func(fds ...int) error, ds ...*os.Root) error {
	fds := make([]int, 0, len(ds))
	var call func(i int) error
	call = func(i int) error {
		if i == len(ds) {
			return fn(fds...)
		}
		dir, err := ds[i].Open(".")
		if err != nil {
			return err
		}
		defer dir.Close()
		rc, err := dir.SyscallConn()
		if err != nil {
			return err
		}
		var ferr error
		if err := rc.Control(func(fd uintptr) {
			fds = append(fds, int(fd))
			ferr = call(i + 1)
		}); err != nil {
			return err
		}
		return ferr
	}
	return call(0)
}

// linkat links from's name oldName as to's newName; it fails if newName
// exists, and links a symbolic link itself, never its target.
func linkat(from *os.Root, oldName string, to *os.Root, newName string) error {
	return withFDs(func(fds ...int) error {
		if err := unix.Linkat(fds[0], oldName, fds[1], newName, 0); err != nil {
			return &os.LinkError{Op: "linkat", Old: oldName, New: newName, Err: err}
		}
		return nil
	}, from, to)
}

// renameat renames from's oldName to to's newName, replacing newName.
func renameat(from *os.Root, oldName string, to *os.Root, newName string) error {
	return withFDs(func(fds ...int) error {
		if err := unix.Renameat(fds[0], oldName, fds[1], newName); err != nil {
			return &os.LinkError{Op: "renameat", Old: oldName, New: newName, Err: err}
		}
		return nil
	}, from, to)
}
