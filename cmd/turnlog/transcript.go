package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/internal/worker"
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
	var flags turnlog.Adapter
	addTargetFlags(fs, &flags, "the Session's spec.adapter")
	sio, ns, code, ok := f.openSession(fs, args, stderr)
	if !ok {
		return code
	}
	tr, target, err := sio.Transcript(ctx, ns, *f.session, func(spec turnlog.Adapter) turnlog.Adapter {
		for _, o := range []struct {
			dst *string
			v   string
		}{{&spec.Kind, flags.Kind}, {&spec.API, flags.API}, {&spec.Provider, flags.Provider}, {&spec.Model, flags.Model},
			{&spec.ReleaseLine, flags.ReleaseLine}} {
			if o.v != "" {
				*o.dst = o.v
			}
		}
		return spec
	})
	if errors.Is(err, worker.ErrNotReplayed) {
		line := ""
		if target.ReleaseLine != "" {
			line = " on release line " + target.ReleaseLine
		}
		err = fmt.Errorf("Session %s/%s has not been replayed for target %s/%s/%s/%s%s yet (%w); it is replayed for its spec.adapter, once a turn has ended",
			ns, *f.session, target.Kind, target.API, target.Provider, target.Model, line, err)
	}
	if err == nil {
		err = writeJSON(stdout, tr)
	}
	if err != nil {
		return fail(stderr, "transcript", err)
	}
	return 0
}
