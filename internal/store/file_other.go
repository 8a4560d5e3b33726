//go:build !unix

package store

import (
	"os"
	"path/filepath"
)

// Without linkat(2) and renameat(2) the checked directories are named again
// by path, so a link swapped in between could redirect the write. The
// file:// store is meant for Unix hosts; this keeps the command-line tools
// building elsewhere.

// linkat links from's name oldName as to's newName; it fails if newName
// exists.
func linkat(from *os.Root, oldName string, to *os.Root, newName string) error {
	return os.Link(filepath.Join(from.Name(), oldName), filepath.Join(to.Name(), newName))
}

// renameat renames from's oldName to to's newName, replacing newName.
func renameat(from *os.Root, oldName string, to *os.Root, newName string) error {
	return os.Rename(filepath.Join(from.Name(), oldName), filepath.Join(to.Name(), newName))
}
