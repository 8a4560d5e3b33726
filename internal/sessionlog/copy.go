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
// src. Segments that end at or before cut are copied inside the service;
// only the segment holding cut, if cut is not its last event, is read and
// written again without its tail, in pieces of at most SplitBytes. So its
// cost is a request per segment plus at most one segment's bytes through
// the process, of which it holds one piece at a time. The object holding
// the cut is created last, so dst's head is at the cut only once its
// whole prefix is in place.
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
	segs, i, whole, tail := plan.segs, plan.i, plan.whole, plan.tail
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
		seg := whole[len(whole)-1]
		whole = whole[:len(whole)-1]
		last = func(ctx context.Context) error { return s.copySegment(ctx, to, seg, done) }
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(copyConcurrency)
	for _, seg := range whole {
		g.Go(func() error { return s.copySegment(gctx, to, seg, done) })
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
	i     int
	whole []segment
	tail  []tailPiece
}

// planPrefix plans the copy of l's events 0..cut, reading at most the
// segment that holds the cut.
func (l *Log) planPrefix(ctx context.Context, cut int64) (prefixPlan, error) {
	segs, err := l.listSegments(ctx)
	if err != nil {
		return prefixPlan{}, err
	}
	if len(segs) == 0 {
		return prefixPlan{}, fmt.Errorf("%w: the source log is empty", ErrBeyondHead)
	}
	// i is the segment holding cut, if the log reaches that far.
	i := sort.Search(len(segs), func(i int) bool { return segs[i].first > cut }) - 1
	p := prefixPlan{segs: segs, i: i, whole: segs[:i]}
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

// copiedAlready returns the objects of the plan that dst holds already:
// dst may hold exactly this plan, partly done, and nothing else.
func (s *Store) copiedAlready(ctx context.Context, to *Log, whole []segment, tail []tailPiece) (map[string]bool, error) {
	want := map[string]int64{}
	for _, seg := range whole {
		want[to.segmentKey(seg.first)] = seg.size
	}
	for _, p := range tail {
		want[to.segmentKey(p.first)] = p.size
	}
	done := map[string]bool{}
	for o, err := range s.bucket.List(ctx, to.root) {
		if err != nil {
			return nil, err
		}
		if size, ok := want[o.Key]; !ok || size != o.Size {
			return nil, fmt.Errorf("%w: found %s", ErrDestinationNotEmpty, o.Key)
		}
		done[o.Key] = true
	}
	return done, nil
}

// copySegment copies seg into to's log inside the service, unless done
// says it is there already.
func (s *Store) copySegment(ctx context.Context, to *Log, seg segment, done map[string]bool) error {
	dst := to.segmentKey(seg.first)
	if done[dst] {
		return nil
	}
	return retry(ctx, func() error { return s.bucket.Copy(ctx, dst, seg.key) })
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
	return writeCopiedTail(ctx, b, dst, data)
}

// writeCopiedTail creates the rewritten segment, accepting an identical
// object (a retry whose first attempt landed) as success.
func writeCopiedTail(ctx context.Context, b store.Bucket, key string, data []byte) error {
	md := map[string]string{metaWriter: "copy." + rand.Text()}
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
