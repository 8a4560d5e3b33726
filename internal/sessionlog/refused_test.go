package sessionlog_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/testutil/storetest"
)

// On a file:// store a host can put links and FIFOs in its Session's root.
// Deleting the Session removes them themselves, never what they point to;
// a link in place of a directory above the root is not the Session's, and
// the deletion fails without removing anything.
func TestDeleteRemovesLinksNotTheirTargets(t *testing.T) {
	dir := t.TempDir()
	b := storetest.Open(t, "file://"+dir, nil)
	s := sessionlog.New(b)
	own := sessionlog.Location{Namespace: "team-a", Session: "s", UID: "1"}
	other := sessionlog.Location{Namespace: "team-b", Session: "v", UID: "2"}
	for _, loc := range []sessionlog.Location{own, other} {
		lg := openLog(t, b, loc)
		if _, err := lg.NewAppender("").Append(ctx(t), ev("turn/start", 1, ""), ev("turn/end", 1, `,"reason":"stop"`)); err != nil {
			t.Fatal(err)
		}
		if err := lg.PutDerived(ctx(t), "checkpoint.json", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	want := readAll(t, openLog(t, b, other))
	otherFiles := files(t, filepath.Join(dir, "team-b"))

	root := filepath.Join(dir, "team-a", "s", "1")
	if err := os.RemoveAll(filepath.Join(root, "derived")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../team-b/v/2/derived", filepath.Join(root, "derived")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "log", "00000000000000000002.jsonl"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx(t), own, nil); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if left := files(t, root); len(left) != 0 {
		t.Fatalf("Delete left %v in the root", left)
	}

	// team-a/t is a link to team-b/v: the root team-a/t/2/ is bob's.
	if err := os.Symlink("../team-b/v", filepath.Join(dir, "team-a", "t")); err != nil {
		t.Fatal(err)
	}
	_, err := s.Delete(ctx(t), sessionlog.Location{Namespace: "team-a", Session: "t", UID: "2"}, nil)
	if re, ok := errors.AsType[*store.RefusedError](err); !ok || re.At != "team-a/t" {
		t.Fatalf("Delete through a linked session directory = %v, want team-a/t refused", err)
	}

	if got := files(t, filepath.Join(dir, "team-b")); len(got) != len(otherFiles) {
		t.Fatalf("the other namespace's files went from %v to %v", otherFiles, got)
	}
	for path, data := range otherFiles {
		if got, err := os.ReadFile(path); err != nil || string(got) != data {
			t.Fatalf("%s: %q, %v; want %q", path, got, err, data)
		}
	}
	if got := readAll(t, openLog(t, b, other)); len(got) != len(want) {
		t.Fatalf("the other log holds %d events, want %d", len(got), len(want))
	}
}

// files maps every file under dir to its content, and every link and
// special file to its type.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		switch {
		case err != nil || e.IsDir():
			return err
		case !e.Type().IsRegular():
			out[path] = e.Type().String()
			return nil
		}
		data, err := os.ReadFile(path)
		out[path] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
