package agenthost

import (
	"context"
	"io"
	"math"

	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/worker"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Store is the object store Sessions keep their logs in.
type Store struct {
	bucket store.Bucket
	logs   *sessionlog.Store
	prefix string
}

// StoreOptions adjust OpenStore. The zero value is fine.
type StoreOptions struct {
	// Prefix is the prefix the operator configured for this store on the
	// turnlog manager ("" for none); Sessions' logs are under
	// [<prefix>/]<namespace>/<name>/<uid>/.
	Prefix string
	// AccessKeyID and SecretAccessKey, when both are set, are static
	// credentials for s3:// URLs; otherwise the AWS default chain applies.
	AccessKeyID, SecretAccessKey string
}

// OpenStore opens the object store at url: s3://bucket?region=...,
// gs://bucket, azblob://container, file:///dir, or mem:// (one process, for
// tests). Close it when done.
func OpenStore(ctx context.Context, url string, opts *StoreOptions) (*Store, error) {
	if opts == nil {
		opts = &StoreOptions{}
	}
	b, err := store.Open(ctx, url, &store.Options{AccessKeyID: opts.AccessKeyID, SecretAccessKey: opts.SecretAccessKey})
	if err != nil {
		return nil, err
	}
	return &Store{bucket: b, logs: sessionlog.New(b), prefix: opts.Prefix}, nil
}

// Close releases the store's connections.
func (s *Store) Close() error { return s.bucket.Close() }

// Location names one Session's log: the Session's namespace, name and uid
// (a Session deleted and created again under the same name gets a new uid,
// and so a new, empty log), under the store's Prefix.
type Location struct {
	Prefix    string
	Namespace string
	Session   string
	UID       string
}

func (l Location) internal() sessionlog.Location {
	return sessionlog.Location{Prefix: l.Prefix, Namespace: l.Namespace, Session: l.Session, UID: l.UID}
}

func (l Location) String() string { return l.internal().String() }

// Log is one Session's log. Its methods are safe for concurrent use.
type Log struct {
	log    *sessionlog.Log
	loc    Location
	target Adapter
	// kube, when set, is the Session the log belongs to, for nudges.
	kube    client.Client
	session client.ObjectKey
}

// Log returns the log at loc; it need not exist yet. Its transcripts are
// read for the zero target (the log's session/start adapter); use
// Log.WithTarget for a Session whose spec.adapter is set.
func (s *Store) Log(loc Location) (*Log, error) {
	l, err := s.logs.Log(loc.internal())
	if err != nil {
		return nil, err
	}
	return &Log{log: l, loc: loc}, nil
}

// WithTarget returns the same log, its transcripts read for target: the
// Session's spec.adapter, which is what the workers replay for.
func (l *Log) WithTarget(target Adapter) *Log {
	c := *l
	c.target = target
	return &c
}

// Location returns where the log is.
func (l *Log) Location() Location { return l.loc }

// Target returns the target Transcript reads for.
func (l *Log) Target() Adapter { return l.target }

// Head is where a log ends.
type Head struct {
	// Next is the seq the next event gets: the number of events.
	Next int64
	// Turns is the highest turn number so far.
	Turns int64
	// TurnOpen: the last turn has started and not ended.
	TurnOpen bool
	// LastTurnEnd is the seq of the last turn/end, -1 if none.
	LastTurnEnd int64
}

// Head reads where the log ends, without reading the whole log.
func (l *Log) Head(ctx context.Context) (Head, error) {
	h, err := l.log.Head(ctx)
	if err != nil {
		return Head{}, err
	}
	out := Head{Next: h.Next, Turns: h.Turns, TurnOpen: h.TurnOpen, LastTurnEnd: -1}
	if h.LastTurnEnd != nil {
		out.LastTurnEnd = h.LastTurnEnd.Seq
	}
	return out, nil
}

// Export writes the log as JSON Lines, the format `turnlog replay` and
// `turnlog import` read.
func (l *Log) Export(ctx context.Context, w io.Writer) error {
	for e, err := range l.log.Read(ctx, 0, math.MaxInt64) {
		if err != nil {
			return err
		}
		if _, err := w.Write(append(e.Line, '\n')); err != nil {
			return err
		}
	}
	return nil
}

func (l *Log) workerLog() worker.Log { return worker.StoreLog{Log: l.log} }

// importSegmentBytes is roughly how much one segment of an import holds.
// Segments end at a turn/end, so finding the head reads one or two
// segments, not the log.
const importSegmentBytes = 256 << 10

// Import writes events as the log of an empty Session (a pi-coding-agent
// session read with ReadPiSession, say), in segments that end at a
// turn/end. If the log is not empty it writes nothing and returns a
// *StaleWriterError.
func (l *Log) Import(ctx context.Context, events []Event) error {
	a := l.AppenderAt(0, AppenderOptions{FlushInterval: -1, NoNudge: true})
	size := 0
	for _, e := range events {
		a.mu.Lock()
		a.pending = append(a.pending, e)
		a.mu.Unlock()
		size += len(e.data)
		if e.typ == "turn/end" && size >= importSegmentBytes {
			if err := a.Flush(ctx); err != nil {
				a.Close(ctx)
				return err
			}
			size = 0
		}
	}
	if err := a.Close(ctx); err != nil {
		return err
	}
	return l.Nudge(ctx)
}
