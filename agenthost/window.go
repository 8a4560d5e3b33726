package agenthost

import (
	"context"
	"iter"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
)

// Reading a long log a few turns at a time, from its end backwards: what a
// session browser shows of a Session of thousands of turns.

// The parts of a stored transcript a window reads.
type (
	// TranscriptQuery asks for the stored transcript's messages whose seqs
	// are in [From, Through], with a Hint from an earlier window.
	TranscriptQuery = derived.TranscriptQuery
	// TranscriptHint bounds where in the transcript a query's messages
	// are, for the transcript's Epoch.
	TranscriptHint = derived.TranscriptHint
	// TranscriptWindow is what a query found: the messages with their
	// indexes, the diagnostics of the parts read, the transcript's
	// ThroughSeq and Epoch, and hints for the windows before and after.
	TranscriptWindow = derived.TranscriptWindow
	// WindowMessage is a transcript message and its index.
	WindowMessage = derived.WindowMessage
	// AssemblyState is where the assembly workers got to in a log, with
	// counts of the events before it.
	AssemblyState = derived.AssemblyState
)

// AssemblyAt returns the last state the assembly workers kept at or before
// seq (a few thousand events before it at most): what a comparison of two
// branches starts counting their shared prefix from. found is false when
// there is none.
func (l *Log) AssemblyAt(ctx context.Context, seq int64) (state AssemblyState, found bool, err error) {
	return derived.LoadAssemblyAt(ctx, derived.StoreLog{Log: l.log}, seq)
}

// LastTurns yields the events of the n turns that start last before seq
// before (math.MaxInt64: the log's last n turns), and the events between
// turns after them, in seq order, decoded and checked. It reads the
// segments backwards from the one holding before-1 until it has seen n
// turn/starts, and only those, holding about n turns in memory. A log with
// fewer turns yields everything before before, from seq 0.
func (l *Log) LastTurns(ctx context.Context, before int64, n int) iter.Seq2[LoggedEvent, error] {
	return l.log.LastTurnEvents(ctx, before, n)
}

// TranscriptWindow returns the messages of the stored transcript (for the
// log's target) whose seqs q asks for, reading only the parts that can
// hold them. Before the first replayed turn it returns a
// *NotReplayedError.
func (l *Log) TranscriptWindow(ctx context.Context, q TranscriptQuery) (TranscriptWindow, error) {
	return derived.LoadTranscriptWindow(ctx, l.workerLog(), l.target, q)
}

// StoreOnBucket returns a Store over a bucket already open, for code of
// turnlog's own that wraps the bucket (a test counting what is read).
// Closing the Store closes the bucket.
func StoreOnBucket(b store.Bucket, opts *StoreOptions) *Store {
	if opts == nil {
		opts = &StoreOptions{}
	}
	return &Store{bucket: b, logs: sessionlog.New(b), prefix: opts.Prefix}
}
