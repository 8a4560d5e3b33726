package pirecord

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
)

// TestBadConfigurationSaysSo: a store URL the package cannot use, or a
// Session another pi session was recorded into, is reported in one line,
// and pi goes on working without recording.
func TestBadConfigurationSaysSo(t *testing.T) {
	gw := versitygw.Start(t)
	prov := newProvider(t)
	for _, c := range []struct{ url, want string }{
		{"gs://sessions", `turnlog: open the log: turnlog store URL "gs://sessions": the pi package records into s3:// and file:// stores`},
		{"s3://sessions?regoin=eu-west-1", `turnlog: open the log: turnlog store URL "s3://sessions?regoin=eu-west-1": unknown parameter "regoin"`},
		{"file:///nonexistent-turnlog-store", `turnlog: open the log: turnlog store URL "file:///nonexistent-turnlog-store": ENOENT: no such file or directory, stat '/nonexistent-turnlog-store'`},
		{"file://" + linkedNamespace(t), `turnlog: open the log: list "team-a/chat-bad/b4d/log/": refused: "team-a" is a symbolic link; the file store opens only regular files and directories and follows no symbolic links`},
	} {
		e := newEnv(t, prov, c.url, gw, "team-a", "chat-bad", "b4d")
		pi := e.Start()
		prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "Still here."}}, Stop: "end_turn"})
		pi.Prompt("Are you there?")
		pi.Quit()
		said := strings.Join(pi.Notes, "\n") + "\n" + pi.Stderr()
		if !strings.Contains(said, c.want+"\n") {
			t.Errorf("TURNLOG_STORE_URL=%s: pi said\n%s\nwant the line %q", c.url, said, c.want)
		}
	}

	// A new pi session named into a Session that holds another one's log.
	ref := sessionRef{gw: gw, loc: agenthost.Location{Namespace: "team-a", Session: "chat-taken", UID: "7a4e"}}
	e := newEnv(t, prov, gw.URL, gw, ref.loc.Namespace, ref.loc.Session, ref.loc.UID)
	first := e.Start()
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "First."}}, Stop: "end_turn"})
	first.Prompt("Hello.")
	first.Quit()
	before := ref.export(t)
	second := e.Start()
	prov.Queue(reply{Blocks: []block{{Kind: "text", Text: "Second."}}, Stop: "end_turn"})
	second.Prompt("Hello again.")
	second.Quit()
	said := strings.Join(second.Notes, "\n")
	if !regexp.MustCompile(`turnlog: open the log: team-a/chat-taken was recorded from pi session \S+, not this one \(\S+\): resume that session, or record into another Session`).MatchString(said) {
		t.Errorf("a second pi session into one Session: pi said\n%s\nstderr:\n%s", said, second.Stderr())
	}
	if after := ref.export(t); !bytes.Equal(after, before) {
		t.Errorf("the second pi session wrote to the first one's log:\n%s", after[len(before):])
	}
}

// linkedNamespace is a file store whose namespace directory team-a is a
// symbolic link to another directory: refused, as the Go store refuses it.
func linkedNamespace(t *testing.T) string {
	dir := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "team-a")); err != nil {
		t.Fatal(err)
	}
	return dir
}
