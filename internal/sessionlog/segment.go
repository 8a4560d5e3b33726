package sessionlog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	gojson "github.com/goccy/go-json"

	"github.com/turnlog/turnlog/internal/store"
)

// Event is one event of a log as stored.
type Event struct {
	Seq  int64
	Type string
	// Turn is 0 for an event outside any turn.
	Turn int64
	// Reason is turn/end's reason, else "".
	Reason string
	// Line is the event's JSON object, without the newline. It is the
	// caller's to keep.
	Line []byte
}

// header is the part of an event the storage layer needs; the rest of the
// object passes through untouched.
type header struct {
	Seq    *int64 `json:"seq"`
	Type   string `json:"type"`
	Turn   int64  `json:"turn"`
	Reason string `json:"reason"`
}

// batch is events ready to be written at any seq: compact JSON objects
// without a seq member.
type batch [][]byte

func prepare(events [][]byte) (batch, error) {
	if len(events) == 0 {
		return nil, errors.New("append: no events")
	}
	out := make(batch, len(events))
	for i, ev := range events {
		var buf bytes.Buffer
		if err := json.Compact(&buf, ev); err != nil {
			return nil, fmt.Errorf("append: event %d of the batch: invalid JSON: %w", i, err)
		}
		if buf.Len() == 0 || buf.Bytes()[0] != '{' {
			return nil, fmt.Errorf("append: event %d of the batch: not a JSON object", i)
		}
		var h struct {
			Seq  json.RawMessage `json:"seq"` // set even for "seq":null
			Type string          `json:"type"`
			Turn int64           `json:"turn"`
		}
		if err := json.Unmarshal(buf.Bytes(), &h); err != nil {
			return nil, fmt.Errorf("append: event %d of the batch: %w", i, err)
		}
		if h.Seq != nil {
			return nil, fmt.Errorf("append: event %d of the batch has a seq; the log assigns seqs", i)
		}
		if h.Type == "" {
			return nil, fmt.Errorf("append: event %d of the batch has no type", i)
		}
		if buf.Len()+seqRoom > MaxLineBytes {
			return nil, fmt.Errorf("append: event %d of the batch is %d bytes, longer than the line limit of %d MiB", i, buf.Len(), MaxLineBytes>>20)
		}
		out[i] = buf.Bytes()
	}
	return out, nil
}

// seqRoom is what a stored line adds to an event: `"seq":N,` and the
// newline, with room to spare.
const seqRoom = 30

// split cuts b into batches of at most limit bytes as stored, each of at
// least one event.
func (b batch) split(limit int) []batch {
	var out []batch
	start, size := 0, 0
	for i, ev := range b {
		if i > start && size+len(ev)+seqRoom > limit {
			out = append(out, b[start:i])
			start, size = i, 0
		}
		size += len(ev) + seqRoom
	}
	return append(out, b[start:])
}

// render gives the segment holding b at seqs first, first+1, ….
func (b batch) render(first int64) []byte {
	n := 0
	for _, ev := range b {
		n += len(ev) + seqRoom
	}
	out := make([]byte, 0, n)
	for i, ev := range b {
		out = append(out, `{"seq":`...)
		out = strconv.AppendInt(out, first+int64(i), 10)
		out = append(out, ',')
		out = append(out, ev[1:]...) // ev has a type, so it is not "{}"
		out = append(out, '\n')
	}
	return out
}

// errStop ends a scan early without an error.
var errStop = errors.New("stop")

// scanSegment reads the segment at key, which must hold dense events from
// first on, and calls fn for each. It returns the number of events read.
// The events' lines are only valid until fn returns: a caller that keeps
// one clones it. It holds one line in memory at a time, and refuses a line
// longer than MaxLineBytes or a segment longer than MaxSegmentBytes, so
// that no object in the bucket can make a reader hold more.
func scanSegment(r io.Reader, key string, first int64, fn func(Event) error) (int64, error) {
	counted := &countingReader{r: io.LimitReader(r, MaxSegmentBytes+1)}
	br := bufio.NewReaderSize(counted, 64<<10)
	var n int64
	var long []byte // a line longer than the read buffer, assembled
	for line := 1; ; line++ {
		raw, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], raw...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if len(long) > MaxLineBytes {
					return n, &DataError{Key: key, Line: line, Seq: first + n, Msg: fmt.Sprintf("line longer than the limit of %d MiB", MaxLineBytes>>20)}
				}
				raw, err = br.ReadSlice('\n')
				long = append(long, raw...)
			}
			raw = long
		}
		if counted.n > MaxSegmentBytes {
			return n, segmentTooLarge(key, -1)
		}
		if err == io.EOF {
			return n, atEnd(key, line, first+n, raw)
		}
		if err != nil {
			return n, fmt.Errorf("read %s: %w", key, err)
		}
		if len(raw)-1 > MaxLineBytes {
			return n, &DataError{Key: key, Line: line, Seq: first + n, Msg: fmt.Sprintf("line longer than the limit of %d MiB", MaxLineBytes>>20)}
		}
		e, err := parseLine(key, line, first+n, raw[:len(raw)-1])
		if err != nil {
			return n, err
		}
		n++
		if err := fn(e); err != nil {
			return n, err
		}
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// segmentTooLarge reports a segment over MaxSegmentBytes; size < 0 when
// only reading it found out.
func segmentTooLarge(key string, size int64) error {
	what := "more than the maximum"
	if size >= 0 {
		what = fmt.Sprintf("%d bytes, more than the maximum", size)
	}
	return &DataError{Key: key, Msg: fmt.Sprintf("segment too large: %s of %d bytes (%d MiB)", what, int64(MaxSegmentBytes), MaxSegmentBytes>>20)}
}

// atEnd checks what follows a segment's last newline.
func atEnd(key string, line int, seq int64, rest []byte) error {
	switch {
	case len(rest) > 0:
		return &DataError{Key: key, Line: line, Seq: seq, Msg: "truncated: the last line has no newline"}
	case line == 1:
		return &DataError{Key: key, Msg: "empty segment"}
	}
	return nil
}

// parseLine decodes a stored line's header. Every read of the log (the
// manager's Head, the workers, export, fork copies) decodes every line it
// passes, so the hot path is goccy/go-json, about 4.5 times faster than
// encoding/json here (docs/benchmarks.md, "Reading the log"). A line it
// refuses goes to encoding/json, which decides and words the error;
// FuzzParseLineAgreesWithEncodingJSON checks that the two accept the same
// lines with the same fields.
func parseLine(key string, line int, want int64, raw []byte) (Event, error) {
	var h header
	if gojson.Unmarshal(raw, &h) != nil {
		h = header{}
		if err := json.Unmarshal(raw, &h); err != nil {
			return Event{}, &DataError{Key: key, Line: line, Seq: want, Msg: "invalid JSON: " + err.Error()}
		}
	}
	switch {
	case h.Seq == nil:
		return Event{}, &DataError{Key: key, Line: line, Seq: want, Msg: "no seq"}
	case *h.Seq != want:
		return Event{}, &DataError{Key: key, Line: line, Seq: want, Msg: fmt.Sprintf("seq is %d", *h.Seq)}
	case h.Type == "":
		return Event{}, &DataError{Key: key, Line: line, Seq: want, Msg: "no type"}
	}
	return Event{Seq: want, Type: h.Type, Turn: h.Turn, Reason: h.Reason, Line: raw}, nil
}

// segment is one listed segment object.
type segment struct {
	key   string
	first int64
	size  int64
	// ref is 1 + the index of the reference the segment is read through,
	// 0 for the log's own; through is that reference's last seq, which
	// the segment must not pass.
	ref     int
	through int64
}

// scan reads the segment's bytes from r (see scanSegment), holding a
// referenced segment to its reference's range.
func (seg segment) scan(r io.Reader, fn func(Event) error) (int64, error) {
	if seg.ref > 0 {
		inner := fn
		fn = func(e Event) error {
			if e.Seq > seg.through {
				return beyondReference(seg, e.Seq)
			}
			return inner(e)
		}
	}
	return scanSegment(r, seg.key, seg.first, fn)
}

// streamSegment reads the segment seg, from its start, calling fn for each
// event (whose line is only valid during the call), and returns how many
// events it holds, or how many it read before fn returned errStop. A
// transient failure restarts the read, so fn must tolerate seeing events
// again: restart is called before each new attempt. A segment the listing
// says is too large is refused without reading it.
func (l *Log) streamSegment(ctx context.Context, seg segment, restart func(), fn func(Event) error) (int64, error) {
	if seg.size > MaxSegmentBytes {
		return 0, segmentTooLarge(seg.key, seg.size)
	}
	var n int64
	attempt := 0
	err := retry(ctx, func() error {
		if attempt++; attempt > 1 && restart != nil {
			restart()
		}
		r, err := l.b.NewRangeReader(ctx, seg.key, 0, -1)
		if err != nil {
			return err
		}
		defer r.Close()
		n, err = seg.scan(r, fn)
		return err
	})
	if errors.Is(err, errStop) {
		return n, nil
	}
	return n, err
}

// readLimited reads a whole object of at most limit bytes; a larger one is
// a *DataError naming it and its size, and is not read past the limit.
func readLimited(ctx context.Context, b store.Bucket, key string, limit int64) ([]byte, error) {
	var data []byte
	err := retry(ctx, func() error {
		r, err := b.NewRangeReader(ctx, key, 0, -1)
		if err != nil {
			return err
		}
		defer r.Close()
		// Sized for the whole object when the store says how big it is,
		// rather than grown by doubling: a derived object can be megabytes.
		if sized, ok := r.(interface{ Size() int64 }); ok && sized.Size() >= 0 && sized.Size() <= limit {
			data = make([]byte, sized.Size())
			_, err = io.ReadFull(r, data)
			return err
		}
		data, err = io.ReadAll(io.LimitReader(r, limit+1))
		return err
	})
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		size := fmt.Sprintf("more than %d", limit)
		if attrs, err := b.Attributes(ctx, key); err == nil {
			size = strconv.FormatInt(attrs.Size, 10)
		}
		return nil, &DataError{Key: key, Msg: fmt.Sprintf("object of %s bytes is larger than the limit of %d bytes", size, limit)}
	}
	return data, nil
}
