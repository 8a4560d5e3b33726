package controllers

import (
	"fmt"
	"strconv"
	"strings"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// A fork's child exports no span of the turns it copied (they are in its
// source's traces) and links its first turn to the span of the turn it
// was cut at. That turn is its source's, unless the source is a fork
// itself and the cut lies in the turns the source copied: then it is
// whoever's the source's lineage says. The lineage is the child's
// annotation AnnotationTraceLineage, written once, when the child is made.

// maxLineage bounds the lineage of a fork of a fork of ...: past it the
// oldest entries are dropped, and a cut in their turns links to the
// oldest Session left.
const maxLineage = 16

// lineageEntry is one Session of a lineage and the last seq of its turns.
type lineageEntry struct {
	uid     string
	through int64
}

// childLineage is the lineage of a child of source cut at cut.
func childLineage(source *turnlogv1.Session, cut int64) string {
	entries := parseLineage(source.Annotations[turnlogv1.AnnotationTraceLineage])
	entries = append(entries, lineageEntry{uid: source.LogUID(), through: cut})
	if len(entries) > maxLineage {
		entries = entries[len(entries)-maxLineage:]
	}
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = fmt.Sprintf("%s:%d", e.uid, e.through)
	}
	return strings.Join(parts, " ")
}

// cutTurnOwner is the UID of the Session whose trace holds the turn a
// fork's child was cut at: the first Session of its lineage whose turns
// reach the cut, else (no lineage, a Session made before there was one)
// its source.
func cutTurnOwner(session *turnlogv1.Session) string {
	from := session.Spec.ForkedFrom
	for _, e := range parseLineage(session.Annotations[turnlogv1.AnnotationTraceLineage]) {
		if from.CutSeq <= e.through {
			return e.uid
		}
	}
	return from.UID
}

// parseLineage reads a lineage; an entry that does not read is left out.
func parseLineage(s string) []lineageEntry {
	var entries []lineageEntry
	for _, f := range strings.Fields(s) {
		uid, seq, ok := strings.Cut(f, ":")
		through, err := strconv.ParseInt(seq, 10, 64)
		if !ok || uid == "" || err != nil {
			continue
		}
		entries = append(entries, lineageEntry{uid: uid, through: through})
	}
	return entries
}
