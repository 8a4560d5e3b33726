package sessionlog

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sort"

	"golang.org/x/sync/errgroup"

	"github.com/turnlog/turnlog/internal/store"
)

// copyConcurrency is how many server-side copies run at once.
const copyConcurrency = 8

// CopyPrefix makes dst's log hold src's events 0..cut. It never writes to
// src's log. Segments that end at or before cut are copied inside the
// service, except runs of small ones (under mergeBelow), which are read and
// written as one segment of up to mergeBytes: a host that flushes every
// turn leaves thousands of segments of a few KiB, and a child holding them
// one for one would cost a request per segment to copy, to read and to
// fork again. A merged run is kept in src's derived data too, so the next
// fork of src copies it inside the service instead of reading its
// segments again. Only the segment holding cut, if cut is not its last
// event, is read and written again without its tail, in pieces of at most
// SplitBytes. So the process holds at most one merged segment or piece per
// concurrent copy. The object holding the cut is created last, so dst's
// head is at the cut only once its whole prefix is in place.
//
// dst must be empty, or hold objects written by an earlier CopyPrefix with
// the same arguments (which is then completed): anything else is
// ErrDestinationNotEmpty. A cut past src's last event is ErrBeyondHead.
func (s *Store) CopyPrefix(ctx context.Context, src, dst Location, cut int64) error {
	from, err := s.Log(src)
	if err != nil {
		return err
	}
	to, err := s.Log(dst)
	if err != nil {
		return err
	}
	if from.root == to.root {
		return fmt.Errorf("copy %s to itself", src)
	}
	if cut < 0 {
		return fmt.Errorf("copy %s to %s: negative cut %d", src, dst, cut)
	}
	fail := func(err error) error { return fmt.Errorf("copy %s through seq %d to %s: %w", src, cut, dst, err) }

	plan, err := from.planPrefix(ctx, cut)
	if err != nil {
		return fail(err)
	}
	segs, i, tail := plan.segs, plan.i, plan.tail
	whole := mergeRuns(segs, len(plan.whole), cut)
	done, err := s.copiedAlready(ctx, to, whole, tail)
	if err != nil {
		return fail(err)
	}

	// The object holding the cut is created last, once every other one is
	// in place: dst's head reaches the cut only when its whole prefix is
	// there, so a reader that trusts the head (the child's Session
	// controller, a worker) never reads a log with holes. It is the last
	// tail piece, or, with the cut at a segment boundary, the last whole
	// segment.
	var last func(context.Context) error
	if n := len(tail); n > 0 {
		p := tail[n-1]
		tail = tail[:n-1]
		last = func(ctx context.Context) error {
			return copyTailPiece(ctx, s.bucket, segs[i].key, to.segmentKey(p.first), p, done)
		}
	} else {
		run := whole[len(whole)-1]
		whole = whole[:len(whole)-1]
		last = func(ctx context.Context) error { return s.copyRun(ctx, from, to, run, done) }
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(copyConcurrency)
	for _, run := range whole {
		g.Go(func() error { return s.copyRun(gctx, from, to, run, done) })
	}
	if len(tail) > 0 {
		// One piece at a time, so the process holds at most one.
		g.Go(func() error {
			for _, p := range tail {
				if err := copyTailPiece(gctx, s.bucket, segs[i].key, to.segmentKey(p.first), p, done); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fail(err)
	}
	if err := last(ctx); err != nil {
		return fail(err)
	}
	return nil
}

// prefixPlan is what copying a log's prefix through a cut takes: the
// segments copied whole and the pieces of the segment holding the cut (i,
// of segs) that are written again without its tail.
type prefixPlan struct {
	segs  []segment
	refs  References
	i     int
	whole []segment
	tail  []tailPiece
}

// planPrefix plans the copy of l's events 0..cut, reading at most the
// segment that holds the cut.
func (l *Log) planPrefix(ctx context.Context, cut int64) (prefixPlan, error) {
	segs, refs, err := l.layout(ctx)
	if err != nil {
		return prefixPlan{}, err
	}
	if len(segs) == 0 {
		return prefixPlan{}, fmt.Errorf("%w: the source log is empty", ErrBeyondHead)
	}
	// i is the segment holding cut, if the log reaches that far.
	i := sort.Search(len(segs), func(i int) bool { return segs[i].first > cut }) - 1
	p := prefixPlan{segs: segs, refs: refs, i: i, whole: segs[:i]}
	if i+1 < len(segs) && segs[i+1].first == cut+1 {
		p.whole = segs[:i+1] // cut is a segment boundary: nothing to read
		return p, nil
	}
	var tp tailPlan
	n, err := l.streamSegment(ctx, segs[i], func() { tp = tailPlan{} }, func(e Event) error {
		if e.Seq <= cut {
			tp.add(e)
		}
		return nil
	})
	if err != nil {
		return prefixPlan{}, err
	}
	if i+1 < len(segs) && segs[i].first+n != segs[i+1].first {
		return prefixPlan{}, boundaryError(segs[i], n, segs[i+1])
	}
	switch last := segs[i].first + n - 1; {
	case cut > last:
		return prefixPlan{}, fmt.Errorf("%w: the log ends at seq %d", ErrBeyondHead, last)
	case cut == last:
		p.whole = segs[:i+1]
	default:
		p.tail = tp.done()
	}
	return p, nil
}

// Runs of segments smaller than mergeBelow are merged into one segment of
// the child of at most mergeBytes. Read-ahead reads segments of up to
// mergeBytes several at once, so a child's reader gets the merged ones as
// fast as it got the small ones, with a request for every hundred or so.
// Segments of mergeBelow or more are copied as they are: the service
// copies them without the process, and there are few of them.
var mergeBelow int64 = 64 << 10

const mergeBytes = readAheadMaxBytes

// mergeReads is how many of a run's segments are read at once.
const mergeReads = 4

// segmentRun is consecutive whole segments of the source that become one
// segment of the child: copied inside the service if it is one, read and
// written as one otherwise. end is the seq after its last event. closed
// says the run ended where the source's segments end it (at mergeBytes or
// before a large segment), not at the fork's cut, so every later fork of
// the source has the same run and can copy the one kept.
type segmentRun struct {
	segs   []segment
	end    int64
	bytes  int64
	closed bool
}

// mergeRuns groups the first n of segs, the ones copied whole, into runs:
// each segment of mergeBelow or more alone, the small ones in between
// together up to mergeBytes. The grouping depends only on the source's
// segments and the cut, so a copy that is started again finds the objects
// its first attempt created under the same keys.
func mergeRuns(segs []segment, n int, cut int64) []segmentRun {
	end := func(k int) int64 {
		if k+1 < len(segs) {
			return segs[k+1].first
		}
		return cut + 1
	}
	var runs []segmentRun
	var open segmentRun
	flush := func() {
		if len(open.segs) > 0 {
			runs = append(runs, open)
			open = segmentRun{}
		}
	}
	// endsOpen: next cannot join the open run.
	endsOpen := func(next segment) bool {
		return len(open.segs) > 0 && (next.size >= mergeBelow || open.bytes+next.size > mergeBytes)
	}
	for k, seg := range segs[:n] {
		if endsOpen(seg) {
			open.closed = true
			flush()
		}
		open.segs = append(open.segs, seg)
		open.end = end(k)
		open.bytes += seg.size
		if seg.size >= mergeBelow {
			flush() // alone, copied as it is
		}
	}
	open.closed = n < len(segs) && endsOpen(segs[n])
	flush()
	return runs
}

// mergedName is where the source keeps a merged run, in its derived data.
func mergedName(run segmentRun) string {
	return fmt.Sprintf("merged/%020d-%020d.jsonl", run.segs[0].first, run.end-1)
}

// copiedAlready returns the objects of the plan that dst holds already:
// dst may hold exactly this plan, partly done, and nothing else.
func (s *Store) copiedAlready(ctx context.Context, to *Log, whole []segmentRun, tail []tailPiece) (map[string]bool, error) {
	want := map[string]int64{}
	for _, run := range whole {
		want[to.segmentKey(run.segs[0].first)] = run.bytes
	}
	for _, p := range tail {
		want[to.segmentKey(p.first)] = p.size
	}
	done := map[string]bool{}
	for o, err := range s.bucket.List(ctx, to.root) {
		if err != nil {
			return nil, err
		}
		if notTheLog(to, o.Key) {
			continue
		}
		if size, ok := want[o.Key]; !ok || size != o.Size {
			return nil, fmt.Errorf("%w: found %s", ErrDestinationNotEmpty, o.Key)
		}
		done[o.Key] = true
	}
	return done, nil
}

// copyRun creates run as one segment of to's log, unless done says it is
// there already: a single segment copied inside the service; several
// copied from the merged run an earlier fork kept in from's derived data,
// or read, written as one and kept there.
func (s *Store) copyRun(ctx context.Context, from, to *Log, run segmentRun, done map[string]bool) error {
	dst := to.segmentKey(run.segs[0].first)
	if done[dst] {
		return nil
	}
	if len(run.segs) == 1 {
		return retry(ctx, func() error { return s.bucket.Copy(ctx, dst, run.segs[0].key) })
	}
	// kept is where a run the cut does not end is kept for later forks.
	var kept string
	if run.closed {
		var err error
		if kept, err = from.derivedKey(mergedName(run)); err != nil {
			return err
		}
		// Only a run of the size the merge gives it: a torn or stray object
		// is read again from the segments.
		if a, err := s.bucket.Attributes(ctx, kept); err == nil && a.Size == run.bytes {
			return retry(ctx, func() error { return s.bucket.Copy(ctx, dst, kept) })
		}
	}
	// The segments are read several at a time: a run is a hundred or more
	// of them, each a request of its own.
	data := make([]byte, run.bytes)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(mergeReads)
	off := int64(0)
	for k, seg := range run.segs {
		end := run.end
		if k+1 < len(run.segs) {
			end = run.segs[k+1].first
		}
		into := data[off : off+seg.size]
		off += seg.size
		g.Go(func() error {
			b, err := readLimited(gctx, s.bucket, seg.key, seg.size)
			if err != nil {
				return err
			}
			// Merged, a segment's lines no longer have a boundary of their
			// own that a reader checks, so the copy checks it: the lines the
			// listing says the segment holds, each with its newline.
			if lines := int64(bytes.Count(b, []byte{'\n'})); len(b) == 0 || int64(len(b)) != seg.size || lines != end-seg.first || b[len(b)-1] != '\n' {
				return &DataError{Key: seg.key, Msg: fmt.Sprintf("holds %d bytes in %d lines; the log's listing says %d bytes and seqs %d..%d", len(b), lines, seg.size, seg.first, end-1)}
			}
			copy(into, b)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	md := map[string]string{metaWriter: "copy." + rand.Text()}
	if err := writeCopied(ctx, s.bucket, dst, data, md); err != nil {
		return err
	}
	if kept != "" {
		// Kept for the next fork. Derived data can always be made again,
		// so a failure here costs that fork the reads, nothing else.
		_ = s.bucket.Put(ctx, kept, data, md)
	}
	return nil
}

// tailPiece is a run of lines of the segment holding a fork's cut, to be
// written as one segment of the child: the lines of seqs first.. at byte
// offset off, size bytes long.
type tailPiece struct {
	first, off, size int64
}

// tailPlan cuts the lines through the cut into pieces of at most
// SplitBytes (or one longer line), so that copying them holds one piece in
// memory, not the segment.
type tailPlan struct {
	pieces []tailPiece
	open   tailPiece
	lines  int
}

func (t *tailPlan) add(e Event) {
	n := int64(len(e.Line)) + 1 // and its newline
	if t.lines > 0 && t.open.size+n > SplitBytes {
		t.pieces = append(t.pieces, t.open)
		t.open = tailPiece{first: e.Seq, off: t.open.off + t.open.size}
		t.lines = 0
	}
	if t.lines == 0 {
		t.open.first = e.Seq
	}
	t.open.size += n
	t.lines++
}

func (t *tailPlan) done() []tailPiece {
	if t.lines > 0 {
		return append(t.pieces, t.open)
	}
	return t.pieces
}

// copyTailPiece reads one piece of the source segment src and creates it
// as the segment dst, unless done says it is there already.
func copyTailPiece(ctx context.Context, b store.Bucket, src, dst string, p tailPiece, done map[string]bool) error {
	if done[dst] {
		return nil
	}
	var data []byte
	err := retry(ctx, func() error {
		r, err := b.NewRangeReader(ctx, src, p.off, p.size)
		if err != nil {
			return err
		}
		defer r.Close()
		data = make([]byte, p.size)
		_, err = io.ReadFull(r, data)
		return err
	})
	if errors.Is(err, io.ErrUnexpectedEOF) || err == nil && data[len(data)-1] != '\n' {
		return &DataError{Key: src, Msg: fmt.Sprintf("changed while being copied: bytes %d..%d are not the lines they were", p.off, p.off+p.size-1)}
	}
	if err != nil {
		return err
	}
	return writeCopied(ctx, b, dst, data, map[string]string{metaWriter: "copy." + rand.Text()})
}

// writeCopied creates a segment the copy wrote itself (merged or cut),
// accepting an identical object (a retry whose first attempt landed) as
// success.
func writeCopied(ctx context.Context, b store.Bucket, key string, data []byte, md map[string]string) error {
	return retry(ctx, func() error {
		err := b.PutIfAbsent(ctx, key, data, md)
		if !errors.Is(err, store.ErrExists) {
			return err
		}
		got, gerr := readLimited(ctx, b, key, int64(len(data)))
		if _, ok := errors.AsType[*DataError](gerr); ok || (gerr == nil && !bytes.Equal(got, data)) {
			return fmt.Errorf("%w: %s holds other data", ErrDestinationNotEmpty, key)
		}
		return gerr
	})
}
