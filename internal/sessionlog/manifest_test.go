package sessionlog_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/turnlog/turnlog/internal/sessionlog"
)

// TestRootsListsEachSessionsRoot: one listing tells, for every Session's
// root under a prefix, whether it holds a manifest, a log and a deleted
// mark; keys outside a root are not roots.
func TestRootsListsEachSessionsRoot(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			b := be.open(t)
			s := sessionlog.New(b)
			put := func(key string) {
				if err := b.Put(ctx(t), key, []byte("{}"), nil); err != nil {
					t.Fatal(err)
				}
			}
			put("p/a/chat/u1/session.json")
			put("p/a/chat/u1/log/00000000000000000000.jsonl")
			put("p/a/chat/u2/session.json") // a Session that never had a log
			put("p/a/chat-2/u3/log/references.json")
			put("p/a/gone/u4/deleted.json")
			put("p/a/gone/u4/log/00000000000000000000.jsonl")
			put("p/b/chat/u5/session.json")
			put("p/b/chat/u5/derived/assembly/checkpoint.json")
			put("p/stray.json")
			put("other/a/chat/u9/session.json")

			list := func(namespace string) []sessionlog.Root {
				var out []sessionlog.Root
				for r, err := range s.Roots(ctx(t), "p", namespace) {
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, r)
				}
				return out
			}
			at := func(ns, session, uid string) sessionlog.Location {
				return sessionlog.Location{Prefix: "p", Namespace: ns, Session: session, UID: uid}
			}
			// Key order: "chat-2/" sorts before "chat/"; a name's roots
			// are next to each other all the same.
			want := []sessionlog.Root{
				{Location: at("a", "chat-2", "u3"), Log: true},
				{Location: at("a", "chat", "u1"), Manifest: true, Log: true},
				{Location: at("a", "chat", "u2"), Manifest: true},
				{Location: at("a", "gone", "u4"), Log: true, Deleted: true},
				{Location: at("b", "chat", "u5"), Manifest: true},
			}
			if got := list(""); !slices.Equal(got, want) {
				t.Errorf("roots\n%+v\nwant\n%+v", got, want)
			}
			if got := list("b"); !slices.Equal(got, want[4:]) {
				t.Errorf("roots of namespace b: %+v, want %+v", got, want[4:])
			}

			lg, err := s.Log(at("a", "chat", "u2"))
			if err != nil {
				t.Fatal(err)
			}
			if dropped, err := lg.DeleteManifestIfAlone(ctx(t)); err != nil || !dropped {
				t.Errorf("a manifest alone: dropped %v, %v", dropped, err)
			}
			lg, _ = s.Log(at("a", "chat", "u1"))
			if dropped, err := lg.DeleteManifestIfAlone(ctx(t)); err != nil || dropped {
				t.Errorf("a manifest beside a log: dropped %v, %v", dropped, err)
			}
			if _, err := lg.Manifest(ctx(t)); err != nil {
				t.Errorf("the manifest beside a log: %v", err)
			}
			big := make([]byte, sessionlog.MaxManifestBytes+1)
			if err := lg.PutManifest(ctx(t), big); err == nil {
				t.Error("a manifest over the bound was written")
			}
			if err := b.Put(ctx(t), "p/a/chat/u1/session.json", big, nil); err != nil {
				t.Fatal(err)
			}
			var de *sessionlog.DataError
			if _, err := lg.Manifest(ctx(t)); !errors.As(err, &de) {
				t.Errorf("reading a manifest over the bound: %v, want a DataError", err)
			}
		})
	}
}
