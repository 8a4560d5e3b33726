package agenthost

import (
	"context"
	"io"
	"iter"
	"math"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
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
	return sessionio.Export(ctx, l.log, w)
}

func (l *Log) workerLog() derived.Log { return derived.StoreLog{Log: l.log} }

// Import writes events as the log of an empty Session (a pi-coding-agent
// session read with ReadPiSession, say), in segments that end at a
// turn/end, and nudges the Session. If the log is not empty it writes
// nothing and returns an error wrapping a *StaleWriterError.
func (l *Log) Import(ctx context.Context, events []Event) error {
	if err := l.AppendAt(ctx, 0, events); err != nil {
		return err
	}
	return l.Nudge(ctx)
}

// AppendAt writes events, which must be a valid continuation of the log,
// as its seqs next, next+1, ... in segments that end at a turn/end, for a
// host that owns the log (see Log.AppenderAt). If another writer got to a
// segment's seq first, it stops there with an error that wraps a
// *StaleWriterError and says from which seq on nothing was written. It
// does not nudge the Session.
func (l *Log) AppendAt(ctx context.Context, next int64, events []Event) error {
	return sessionio.Write(ctx, l.log, "", next, ioEvents(events))
}

// AppendFrom appends a log fragment read from r — JSON Lines as
// `turnlog export` writes them, whose first seq is the log's next — and
// nudges the Session. The fragment is checked as a continuation of the log
// before anything is written. It returns the first seq written and how many
// events.
func (l *Log) AppendFrom(ctx context.Context, r io.Reader) (first, n int64, err error) {
	return sessionio.Append(ctx, l.kube, l.session, l.log, r)
}

// ReadEvents reads a log fragment in JSON Lines, as `turnlog export` writes
// it, whose first event has seq first (0 for a whole log), checked as
// `turnlog validate` checks a log. The first problem fails the whole read,
// with its line.
func ReadEvents(r io.Reader, first int64) ([]Event, error) {
	read, err := sessionio.ReadEvents(r, first)
	if err != nil {
		return nil, err
	}
	out := make([]Event, len(read))
	for i, e := range read {
		out[i] = Event{typ: e.Type, data: e.Body}
	}
	return out, nil
}

func ioEvents(events []Event) []sessionio.Event {
	out := make([]sessionio.Event, len(events))
	for i, e := range events {
		out[i] = sessionio.Event{Type: e.typ, Body: e.data}
	}
	return out
}

// Events yields the log's events from seq from to its end, in seq order,
// decoded and checked as they are read; it reads only the segments that
// hold them. Iteration stops at the first error, which is yielded.
func (l *Log) Events(ctx context.Context, from int64) iter.Seq2[LoggedEvent, error] {
	return l.log.Events(ctx, from, math.MaxInt64)
}

// EventsThrough yields the events with from <= seq <= through, as Events
// does; through may be past the head.
func (l *Log) EventsThrough(ctx context.Context, from, through int64) iter.Seq2[LoggedEvent, error] {
	return l.log.Events(ctx, from, through)
}
