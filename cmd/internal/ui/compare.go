package ui

import (
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
	"github.com/turnlog/turnlog/internal/compare"
	"github.com/turnlog/turnlog/internal/derived"
)

// maxCompareRows bounds the rows a comparison sends: the turns after the
// fork point, side by side. The rest are counted.
const maxCompareRows = 200

// comparisonView is two Sessions compared as the compare page shows them:
// the prefix their logs share, on one line, then the two branches from
// where they part, a row per turn, as internal/compare pairs them (turns
// of the same number side by side).
type comparisonView struct {
	Shared    compare.Shared `json:"shared"`
	Identical bool           `json:"identical"`
	A         compareSide    `json:"a"`
	B         compareSide    `json:"b"`
	Rows      []compareRow   `json:"rows"`
	// MoreRows counts the rows past maxCompareRows, not sent.
	MoreRows int `json:"moreRows,omitempty"`
}

// compareSide is one branch's Session and how far its log and its stored
// transcript go.
type compareSide struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	HeadSeq    int64  `json:"headSeq"`
	ThroughSeq int64  `json:"throughSeq"`
	Turns      int    `json:"turns"` // after the shared prefix
}

// compareRow is a turn of A beside a turn of B; either may be absent.
type compareRow struct {
	Turn int64         `json:"turn"`
	A    *compare.Turn `json:"a"`
	B    *compare.Turn `json:"b"`
}

// comparison answers GET /api/compare/NS/A/NS/B: A and B compared from
// where their logs part, reading both logs (for two Sessions of one fork
// tree, the events before the fork point from one only) and their stored
// transcripts with the user's credentials, as `kubectl turnlog diff` does.
func (s *Server) comparison(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if s.opts.Store == nil {
		writeError(w, http.StatusServiceUnavailable, errors.New("comparing reads the Sessions' logs: start turnlog ui with --store-url (or $TURNLOG_STORE_URL)"))
		return
	}
	var branches [2]compare.Branch
	var sessions [2]compare.SessionRef
	for i, side := range []string{"a", "b"} {
		ns, name := r.PathValue("namespace"+side), r.PathValue("name"+side)
		log, err := s.opts.Store.OpenSession(ctx, s.opts.Kube, ns, name)
		switch {
		case apierrors.IsNotFound(err):
			writeError(w, http.StatusNotFound, fmt.Errorf("Session %s/%s not found", ns, name))
			return
		case err != nil:
			writeError(w, httpStatus(err), err)
			return
		}
		branches[i] = compare.Branch{Name: ns + "/" + name, Log: log}
		sessions[i] = compare.SessionRef{Namespace: ns, Name: name, UID: log.Location().UID}
	}
	same := compare.SharedThrough(ctx, cmdkit.ForkRecords(s.opts.Kube, sessions[0].Namespace), sessions[0], sessions[1])
	c, err := compare.CompareFrom(ctx, branches[0], branches[1], same)
	switch {
	case errors.Is(err, derived.ErrNotReplayed):
		writeError(w, http.StatusConflict, fmt.Errorf("not replayed yet: %w — the workers store a Session's transcript once a turn of it has ended; compare again then", err))
		return
	case errors.Is(err, compare.ErrNoSharedPrefix):
		writeError(w, http.StatusUnprocessableEntity, fmt.Errorf("%w — compare two Sessions of one fork tree: a fork's child and its source, or two forks of one Session", err))
		return
	case err != nil:
		writeError(w, http.StatusBadGateway, err)
		return
	}
	writeJSON(w, http.StatusOK, viewComparison(c, r))
}

func viewComparison(c compare.Comparison, r *http.Request) comparisonView {
	v := comparisonView{Shared: c.Shared, Identical: c.Identical, Rows: []compareRow{},
		A: compareSide{Namespace: r.PathValue("namespacea"), Name: r.PathValue("namea"), HeadSeq: c.A.HeadSeq, ThroughSeq: c.A.ThroughSeq, Turns: len(c.A.Turns)},
		B: compareSide{Namespace: r.PathValue("namespaceb"), Name: r.PathValue("nameb"), HeadSeq: c.B.HeadSeq, ThroughSeq: c.B.ThroughSeq, Turns: len(c.B.Turns)}}
	pairs := compare.Pairs(c.A.Turns, c.B.Turns)
	if len(pairs) > maxCompareRows {
		v.MoreRows = len(pairs) - maxCompareRows
		pairs = pairs[:maxCompareRows]
	}
	for _, p := range pairs {
		var row compareRow
		if p.A >= 0 {
			row.A, row.Turn = &c.A.Turns[p.A], c.A.Turns[p.A].Turn
		}
		if p.B >= 0 {
			row.B, row.Turn = &c.B.Turns[p.B], c.B.Turns[p.B].Turn
		}
		v.Rows = append(v.Rows, row)
	}
	return v
}
