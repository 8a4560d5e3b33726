package main

import (
	"context"
	"strings"
	"testing"
)

// A turnlog adopt the user cannot run says why in one line, with the
// usage, before it reaches a cluster or a store.
func TestAdoptUsage(t *testing.T) {
	t.Setenv("TURNLOG_STORE_URL", "")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "turnlog adopt: --store-url (or $TURNLOG_STORE_URL) is required"},
		{[]string{"--store-url", "ftp://x"}, 2, `turnlog adopt: --store-url: open bucket ftp://x: unsupported scheme "ftp"`},
		{[]string{"--store-url", "mem://", "--store-prefix", "a//b"}, 2, `turnlog adopt: --store-prefix "a//b"`},
		{[]string{"--store-url", "mem://", "chat"}, 2, "usage: turnlog adopt [flags]"},
	} {
		var stdout, stderr strings.Builder
		code := run(context.Background(), append([]string{"adopt"}, c.args...), strings.NewReader(""), &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("adopt %v: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}
