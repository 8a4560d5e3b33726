package sessionlog

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"

	"golang.org/x/sync/errgroup"

	"github.com/turnlog/turnlog/internal/store"
)

// copyConcurrency is how many server-side copies run at once.
const copyConcurrency = 8

// CopyPrefix makes dst's log hold src's events 0..cut. It never writes to
// src. Segments that end at or before cut are copied inside the service;
// only the segment holding cut, if cut is not its last event, is read and
// written again without its tail. So its cost is a request per segment plus
// at most one segment's bytes through the process.
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

	segs, err := from.listSegments(ctx)
	if err != nil {
		return fail(err)
	}
	if len(segs) == 0 {
		return fail(fmt.Errorf("%w: the source log is empty", ErrBeyondHead))
	}
	// i is the segment holding cut, if the log reaches that far.
	i := sort.Search(len(segs), func(i int) bool { return segs[i].first > cut }) - 1
	whole := segs[:i]
	var tail []byte // the rewritten segment i, if cut is inside it
	if i+1 < len(segs) && segs[i+1].first == cut+1 {
		whole = segs[:i+1] // cut is a segment boundary: nothing to read
	} else {
		data, events, err := from.readSegment(ctx, segs[i])
		if err != nil {
			return fail(err)
		}
		n := int64(len(events))
		if i+1 < len(segs) && segs[i].first+n != segs[i+1].first {
			return fail(boundaryError(segs[i], n, segs[i+1]))
		}
		switch last := segs[i].first + n - 1; {
		case cut > last:
			return fail(fmt.Errorf("%w: the log ends at seq %d", ErrBeyondHead, last))
		case cut == last:
			whole = segs[:i+1]
		default:
			// Lines are in seq order, one per event: keep the first
			// cut-first+1 of them, byte for byte.
			keep := cut - segs[i].first + 1
			end := 0
			for range keep {
				end += bytes.IndexByte(data[end:], '\n') + 1
			}
			tail = data[:end]
		}
	}

	// What dst may already hold: exactly this plan, partly done.
	want := map[string]int64{}
	for _, seg := range whole {
		want[to.segmentKey(seg.first)] = seg.size
	}
	tailKey := to.segmentKey(segs[i].first)
	if tail != nil {
		want[tailKey] = int64(len(tail))
	}
	done := map[string]bool{}
	for o, err := range s.bucket.List(ctx, to.root) {
		if err != nil {
			return fail(err)
		}
		if size, ok := want[o.Key]; !ok || size != o.Size {
			return fail(fmt.Errorf("%w: found %s", ErrDestinationNotEmpty, o.Key))
		}
		done[o.Key] = true
	}

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(copyConcurrency)
	for _, seg := range whole {
		dstKey := to.segmentKey(seg.first)
		if done[dstKey] {
			continue
		}
		g.Go(func() error {
			return retry(gctx, func() error { return s.bucket.Copy(gctx, dstKey, seg.key) })
		})
	}
	if tail != nil && !done[tailKey] {
		g.Go(func() error { return writeCopiedTail(gctx, s.bucket, tailKey, tail) })
	}
	if err := g.Wait(); err != nil {
		return fail(err)
	}
	return nil
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
		got, gerr := b.Get(ctx, key)
		if gerr != nil {
			return gerr
		}
		if !bytes.Equal(got, data) {
			return fmt.Errorf("%w: %s holds other data", ErrDestinationNotEmpty, key)
		}
		return nil
	})
}
