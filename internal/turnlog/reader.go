package turnlog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
)

// MaxLineBytes is the longest line a Reader accepts. Lines are events, and a
// tool result can be large; the limit only guards against unbounded input.
const MaxLineBytes = 16 << 20

// Events is a log's events in log order, each with a nil error, or a zero
// Event with the error met instead. It is the one form in which readers of
// a log take its events: they range over it and stop at the first error,
// unless they can go on after it (see Reader.All).
type Events = iter.Seq2[Event, error]

// Reader reads a log in JSON Lines form, one event per line, holding one line
// in memory at a time. Blank lines are skipped.
type Reader struct {
	br        *bufio.Reader
	validator *Validator
	line      int
	buf       []byte
}

// NewReader reads a whole log and checks its structure as it goes.
func NewReader(r io.Reader) *Reader {
	return NewReaderWith(r, NewValidator())
}

// NewReaderWith reads events checked by v; with a nil v only each line on its
// own is checked (decoding and required fields).
func NewReaderWith(r io.Reader, v *Validator) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), validator: v}
}

// Line is the 1-based number of the last line read.
func (r *Reader) Line() int { return r.line }

// All yields the log's events, reading it once. A structural problem is
// yielded as a *LineError naming the line, and reading goes on with the
// next line if the consumer goes on: `turnlog validate` reports every
// problem, a consumer that wants a valid log stops at the first. Any other
// error (from the underlying reader) is yielded last.
func (r *Reader) All() Events {
	return func(yield func(Event, error) bool) {
		for {
			e, err := r.next()
			if err == io.EOF {
				return
			}
			if !yield(e, err) {
				return
			}
			if err != nil && !isLineError(err) {
				return
			}
		}
	}
}

// next returns the next event. A structural problem is a *LineError naming
// the line; reading may go on after it with the next line. Any other error
// (from the underlying reader) ends the log; io.EOF means the log ended
// cleanly.
func (r *Reader) next() (Event, error) {
	for {
		line, err := r.readLine()
		if err != nil {
			if isLineError(err) && r.validator != nil {
				r.validator.Skip()
			}
			return Event{}, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		e, err := DecodeEvent(line)
		if err != nil {
			if r.validator != nil {
				r.validator.Skip()
			}
			return Event{}, r.locate(err)
		}
		if r.validator != nil {
			if err := r.validator.Check(&e); err != nil {
				return Event{}, r.locate(err)
			}
		}
		return e, nil
	}
}

func isLineError(err error) bool {
	_, ok := errors.AsType[*LineError](err)
	return ok
}

func (r *Reader) locate(err error) error {
	if le, ok := errors.AsType[*LineError](err); ok {
		le.Line = r.line
		return le
	}
	return err
}

// readLine returns the next line, without its line ending, in a slice that
// the caller owns.
func (r *Reader) readLine() ([]byte, error) {
	r.buf = r.buf[:0]
	size, tooLong := 0, false
	for {
		frag, err := r.br.ReadSlice('\n')
		size += len(frag)
		switch {
		case tooLong:
		case size > MaxLineBytes+2: // room for "\r\n"
			tooLong, r.buf = true, r.buf[:0]
		case err == nil && len(r.buf) == 0:
			// The common case: the whole line was in the read buffer.
			r.line++
			return bytes.Clone(trimLineEnd(frag)), nil
		default:
			r.buf = append(r.buf, frag...)
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if size == 0 {
				return nil, io.EOF
			}
		case err != nil:
			return nil, err
		}
		break
	}
	r.line++
	if tooLong {
		return nil, &LineError{Line: r.line, Seq: -1, Err: &problem{kind: ErrMalformed,
			msg: fmt.Sprintf("line longer than %d MiB", MaxLineBytes>>20)}}
	}
	return bytes.Clone(trimLineEnd(r.buf)), nil
}

func trimLineEnd(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// Writer writes events as JSON Lines, each event's Raw bytes unchanged.
type Writer struct {
	w *bufio.Writer
}

// NewWriter returns a Writer; call Flush when done.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 64<<10)}
}

// Write writes one event as one line.
func (w *Writer) Write(e Event) error {
	if len(e.Raw) == 0 || bytes.ContainsAny(e.Raw, "\r\n") {
		return fmt.Errorf("turnlog: event seq %d has no single-line encoding", e.Seq)
	}
	if _, err := w.w.Write(e.Raw); err != nil {
		return err
	}
	return w.w.WriteByte('\n')
}

// Flush writes any buffered events to the underlying writer.
func (w *Writer) Flush() error { return w.w.Flush() }
