package main

import (
	"context"
	"io"

	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
	"github.com/turnlog/turnlog/internal/turnlog"
)

func init() {
	register("transcript", "print the transcript the workers stored for a Session (JSON, as replay prints it)", runTranscript)
}

// runTranscript prints what the workers replayed, without re-running
// replay: the same JSON, byte for byte, as `turnlog replay --through SEQ`
// on the exported log, SEQ being the last replayed turn/end.
func runTranscript(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("transcript", "", stderr)
	f := addClusterFlags(fs)
	var override turnlog.Adapter
	addTargetFlags(fs, &override, "the Session's spec.adapter")
	log, ns, code, ok := f.openSession(ctx, fs, args, stderr)
	if !ok {
		return code
	}
	if err := cmdkit.Transcript(ctx, log, ns, *f.session, override, stdout); err != nil {
		return fail(stderr, "transcript", err)
	}
	return 0
}
