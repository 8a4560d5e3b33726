package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
	"github.com/turnlog/turnlog/internal/compare"
)

func diffCommand(o *options) *cobra.Command {
	var width int
	cmd := &cobra.Command{
		Use:   "diff [NS/]A [NS/]B",
		Short: "Compare two Sessions that share a prefix (a fork and its source, two forks of one Session): the shared turns on one line, then both branches from the fork point, turn by turn",
		Long: `Compare Sessions A and B, whose logs share a prefix: a fork's child and its
source, two children of one Session, any two Sessions whose logs start with the
same events. The first line is the shared prefix, collapsed: its seqs, turns and
messages, and the cut (the seq where the branches part, for a fork its cut).
Then each branch from there, turn by turn: its messages as its stored transcript
has them, with their replay marks (native, foreign, degraded and why, refused
blocks, synthetic tool results) and the frozen partial text of stopped
responses, which is not part of the transcript.

The branches are printed side by side when the output is at least 83 columns
wide (--width, by default the terminal's, else $COLUMNS, else 120), one after
the other otherwise. A Session is NAME in the namespace of -n, or NAMESPACE/NAME.
Reads both logs and transcripts from the object store; for two Sessions of one
fork tree (spec.forkedFrom), the events before the fork point from one log only.`,
		Args: twoSessions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if width < 0 {
				return usageError{fmt.Errorf("--width %d: want 0 (the terminal's) or a number of columns", width)}
			}
			ctx := cmd.Context()
			st, err := o.store.Open(ctx)
			if err != nil {
				return usageError{err}
			}
			defer st.Close()
			kube, ns, err := o.kube()
			if err != nil {
				return err
			}
			var branches [2]compare.Branch
			var sessions [2]compare.SessionRef
			for i, arg := range args {
				namespace, name := sessionRef(arg, ns)
				log, err := st.OpenSession(ctx, kube, namespace, name)
				if err != nil {
					return err
				}
				branches[i] = compare.Branch{Name: namespace + "/" + name, Log: log}
				sessions[i] = compare.SessionRef{Namespace: namespace, Name: name, UID: log.Location().UID}
			}
			same := compare.SharedThrough(ctx, cmdkit.ForkRecords(kube, sessions[0].Namespace), sessions[0], sessions[1])
			c, err := compare.CompareFrom(ctx, branches[0], branches[1], same)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if width == 0 {
				width = terminalWidth(out)
			}
			_, err = io.WriteString(out, formatDiff(c, width))
			return err
		},
	}
	cmd.Flags().IntVar(&width, "width", 0, "columns to print in: side by side from 83 on, one branch after the other below (default: the terminal's width, else $COLUMNS, else 120)")
	return cmd
}

// twoSessions checks for the two Sessions to compare, NAME or
// NAMESPACE/NAME each.
func twoSessions(_ *cobra.Command, args []string) error {
	if len(args) != 2 {
		return usageError{fmt.Errorf("want two Sessions to compare, A and B (NAME or NAMESPACE/NAME), got %d arguments", len(args))}
	}
	for _, arg := range args {
		ns, name, found := strings.Cut(arg, "/")
		if found && (ns == "" || name == "" || strings.Contains(name, "/")) || arg == "" {
			return usageError{fmt.Errorf("Session %q: want NAME or NAMESPACE/NAME", arg)}
		}
	}
	return nil
}

// sessionRef is the namespace and name of a Session argument, NAME in
// namespace or NAMESPACE/NAME.
func sessionRef(arg, namespace string) (string, string) {
	if ns, name, found := strings.Cut(arg, "/"); found {
		return ns, name
	}
	return namespace, arg
}

// terminalWidth is the width of out if it is a terminal, else $COLUMNS,
// else 120.
func terminalWidth(out io.Writer) int {
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
			return w
		}
	}
	if w, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && w > 0 {
		return w
	}
	return 120
}

const (
	// minColumn is the narrowest column the branches are put side by
	// side in; the gutter between them is columnGutter.
	minColumn    = 40
	columnGutter = " │ "
	// minWidth is the narrowest output: one branch after the other.
	minWidth = 20
	// entryLines is how many lines an entry's text takes at most.
	entryLines = 4
)

// formatDiff is the comparison as the command prints it: the shared
// prefix on one line, then the two branches side by side in columns of
// half the width, or one after the other when that is narrower than
// minColumn.
func formatDiff(c compare.Comparison, width int) string {
	var b strings.Builder
	b.WriteString(sharedLine(c) + "\n")
	if c.Identical {
		return b.String()
	}
	b.WriteString("\n")
	width = max(width, minWidth)
	column := (width - utf8.RuneCountInString(columnGutter)) / 2
	if column < minColumn {
		writeOneAfterTheOther(&b, c, width)
	} else {
		writeSideBySide(&b, c, column)
	}
	return b.String()
}

// writeOneAfterTheOther writes each branch under a header of its own.
func writeOneAfterTheOther(b *strings.Builder, c compare.Comparison, width int) {
	for i, side := range []compare.Side{c.A, c.B} {
		if i > 0 {
			b.WriteString("\n")
		}
		name, detail := sideTitle([]string{"A", "B"}[i], side)
		b.WriteString("=== " + name + " (" + detail + ") ===\n")
		if len(side.Turns) == 0 {
			writeLines(b, nothingAfter(c.Shared.CutSeq, width))
		}
		for j, t := range side.Turns {
			if j > 0 {
				b.WriteString("\n")
			}
			writeLines(b, turnLines(t, width))
		}
	}
}

// writeSideBySide writes the branches in two columns, each turn beside
// the other branch's turn of the same number.
func writeSideBySide(b *strings.Builder, c compare.Comparison, column int) {
	nameA, detailA := sideTitle("A", c.A)
	nameB, detailB := sideTitle("B", c.B)
	writeColumns(b, []string{clip(nameA, column), clip(detailA, column)}, []string{clip(nameB, column), clip(detailB, column)}, column)
	b.WriteString(strings.Repeat("─", column+1) + "┼" + strings.Repeat("─", column+1) + "\n")
	for i, p := range compare.Pairs(c.A.Turns, c.B.Turns) {
		if i > 0 {
			writeColumns(b, []string{""}, []string{""}, column)
		}
		var left, right []string
		if p.A >= 0 {
			left = turnLines(c.A.Turns[p.A], column)
		}
		if p.B >= 0 {
			right = turnLines(c.B.Turns[p.B], column)
		}
		if i == 0 && len(c.A.Turns) == 0 {
			left = nothingAfter(c.Shared.CutSeq, column)
		}
		if i == 0 && len(c.B.Turns) == 0 {
			right = nothingAfter(c.Shared.CutSeq, column)
		}
		writeColumns(b, left, right, column)
	}
}

// sharedLine is the shared prefix on one line, e.g. "shared: seq 0-16,
// turns 1-3, 5 messages; cut at seq 16 (turn 3, aborted)".
func sharedLine(c compare.Comparison) string {
	s := c.Shared
	turns := fmt.Sprintf("turns %d-%d", s.FirstTurn, s.LastTurn)
	if s.Turns == 1 {
		turns = fmt.Sprintf("turn %d", s.FirstTurn)
	}
	line := fmt.Sprintf("shared: seq 0-%d, %s, %s", s.CutSeq, turns, count(s.Messages, "message"))
	switch {
	case c.Identical:
		return line + ": the two logs are the same"
	case s.CutSeq == s.LastTurnEndSeq:
		return line + fmt.Sprintf("; cut at seq %d (turn %d, %s)", s.CutSeq, s.LastTurn, s.LastReason)
	}
	return line + fmt.Sprintf("; cut at seq %d (after turn %d)", s.CutSeq, s.LastTurn)
}

// sideTitle names a branch: its letter and Session, and where its log
// ends and how far its transcript goes.
func sideTitle(letter string, s compare.Side) (name, detail string) {
	name = letter + ": " + s.Name
	if len(s.Turns) == 0 {
		return name, fmt.Sprintf("head %d", s.HeadSeq)
	}
	return name, fmt.Sprintf("head %d, replayed through %d", s.HeadSeq, s.ThroughSeq)
}

// nothingAfter says that a branch ends at the cut.
func nothingAfter(cut int64, width int) []string {
	return wrap(fmt.Sprintf("(nothing after seq %d: its log ends there)", cut), width, "", entryLines)
}

// turnLines are a turn's title and entries in lines no wider than width.
func turnLines(t compare.Turn, width int) []string {
	lines := []string{clip(turnTitle(t), width)}
	for _, e := range t.Entries {
		lines = append(lines, wrap(entryLabel(e)+": "+oneLine(e.Text), width, "  ", entryLines)...)
	}
	return lines
}

// turnTitle is e.g. "turn 4, seq 17-22, stop".
func turnTitle(t compare.Turn) string {
	if t.Turn == 0 {
		return fmt.Sprintf("between turns, seq %d-%d", t.StartSeq, t.EndSeq)
	}
	if t.EndSeq < 0 {
		return fmt.Sprintf("turn %d, seq %d-, open", t.Turn, t.StartSeq)
	}
	title := fmt.Sprintf("turn %d, seq %d-%d, %s", t.Turn, t.StartSeq, t.EndSeq, t.Reason)
	if !t.Replayed {
		title += ", not replayed yet"
	}
	return title
}

// entryLabel is what an entry is, with its marks: "assistant [foreign,
// degraded: version]", "toolResult grep [synthetic]", "frozen [stopped]".
func entryLabel(e compare.Entry) string {
	if e.Kind == compare.KindFrozen {
		stop := e.StopReason
		if stop == "" {
			stop = "stopped"
		}
		return "frozen [" + stop + "]"
	}
	label := e.Role
	if e.ToolName != "" {
		label += " " + e.ToolName
	}
	var marks []string
	if e.Replay != "" {
		marks = append(marks, e.Replay)
	}
	if e.Degraded != nil {
		marks = append(marks, "degraded: "+e.Degraded.Cause)
	}
	if n := len(e.Refused); n > 0 {
		marks = append(marks, count(int64(n), "refused block"))
	}
	if n := len(e.DroppedBlocks); n > 0 {
		marks = append(marks, count(int64(n), "dropped block"))
	}
	if e.Synthetic {
		marks = append(marks, "synthetic")
	}
	if e.Origin != "" {
		marks = append(marks, e.Origin)
	}
	if len(marks) > 0 {
		label += " [" + strings.Join(marks, ", ") + "]"
	}
	return label
}

func count(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// oneLine is text on one line, its runs of white space one space and its
// control characters (which a terminal would act on) left out.
func oneLine(text string) string {
	text = strings.Join(strings.Fields(text), " ")
	text = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, text)
	if text == "" {
		return "-"
	}
	return text
}

// wrap breaks text into lines of at most width characters at spaces,
// the first indented by indent and the rest by two more, and at most
// maxLines of them, the last ending in "…" when text goes on.
func wrap(text string, width int, indent string, maxLines int) []string {
	var lines []string
	prefix := indent
	words := strings.Fields(text)
	for len(words) > 0 && len(lines) < maxLines {
		room := width - utf8.RuneCountInString(prefix)
		line := ""
		for len(words) > 0 {
			w := words[0]
			next := w
			if line != "" {
				next = line + " " + w
			}
			if utf8.RuneCountInString(next) > room {
				if line == "" { // a word longer than the line is cut
					line, words[0] = string([]rune(w)[:room]), string([]rune(w)[room:])
				}
				break
			}
			line, words = next, words[1:]
		}
		lines = append(lines, prefix+line)
		prefix = indent + "  "
	}
	if len(words) > 0 {
		last := []rune(lines[len(lines)-1])
		if len(last) >= width {
			last = last[:width-1]
		}
		lines[len(lines)-1] = string(last) + "…"
	}
	return lines
}

// clip cuts s to width characters.
func clip(s string, width int) string {
	if r := []rune(s); len(r) > width {
		return string(r[:width-1]) + "…"
	}
	return s
}

// writeColumns writes left and right side by side, the left padded to
// width, the shorter one continued with blank lines.
func writeColumns(b *strings.Builder, left, right []string, width int) {
	for i := range max(len(left), len(right)) {
		l, r := "", ""
		if i < len(left) {
			l = left[i]
		}
		if i < len(right) {
			r = right[i]
		}
		line := l + strings.Repeat(" ", width-utf8.RuneCountInString(l)) + columnGutter + r
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
}

func writeLines(b *strings.Builder, lines []string) {
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
}
