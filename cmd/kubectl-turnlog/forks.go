package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnlog/turnlog/agenthost"
	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/turnlog"
)

func forkPointsCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "fork-points SESSION",
		Short: "List where the Session can be forked: each turn's cut seq, end reason, first words, whether it degraded and the refused blocks a child keeps",
		Long: `List the Session's turns, one line each: CUT, the seq of the turn's turn/end
(fork with --at CUT and the child ends with this turn; any seq of the turn
cuts there too), TURN, END (why the turn ended, "open" while it streams),
DEGRADED (whether replay degraded one of its messages, and the cause; "pending"
before the workers have replayed the turn), REFUSED (the thinking blocks the
provider had already refused by the cut, which a child cut there sends again
unless it drops them: fork --refused-blocks=Drop) and USER, the first words
of its user message. Reads the whole log from the object store.`,
		Args: oneSession,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			log, kube, ns, err := o.session(ctx, args[0])
			if err != nil {
				return err
			}
			turns, err := log.Turns(ctx)
			if err != nil {
				return fmt.Errorf("read the log of Session %s/%s: %w", ns, args[0], err)
			}
			if len(turns) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "Session %s/%s has no turns yet.\n", ns, args[0])
				return nil
			}
			found, err := replayProblems(ctx, kube, log, ns, args[0])
			if err != nil {
				return err
			}
			return printForkPoints(cmd.OutOrStdout(), turns, found)
		},
	}
}

// problems is what replay found in a Session's log, as fork-points shows it.
type problems struct {
	// degraded is the cause of each degraded seq.
	degraded map[int64]string
	// refused are the blocks the provider refused: each one's seq and the
	// seq of the response that reported it.
	refused []refusal
	// dropped: the Session leaves refused blocks out of its transcript.
	dropped bool
	// through is the last seq replayed, -1 if none.
	through int64
}

type refusal struct{ seq, reportedAt int64 }

// replayProblems reads what the workers found: from the stored transcript,
// which lists every degraded message and refused block it holds, and from
// the Session's status, which also remembers the degraded messages a
// compaction dropped (the first 20 of each cause).
func replayProblems(ctx context.Context, kube client.Client, log *agenthost.Log, ns, name string) (problems, error) {
	out := problems{degraded: map[int64]string{}, through: -1}
	session := &turnlogv1.Session{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, session); err != nil {
		return out, fmt.Errorf("Session %s/%s: %w", ns, name, err)
	}
	out.dropped = sessionio.Target(session.Spec.Adapter).DropsRefused()
	if r := session.Status.Replay; r != nil {
		out.through = r.ThroughSeq
		for _, c := range cmdkit.DegradedCauses(r.DegradedSeqs) {
			for _, s := range c.Seqs {
				out.degraded[s] = c.Cause
			}
		}
	}
	tr, err := log.Transcript(ctx)
	switch {
	case errors.Is(err, agenthost.ErrNotReplayed):
	case err != nil:
		return out, err
	default:
		out.through = max(out.through, tr.ThroughSeq)
		for _, d := range tr.Diagnostics {
			switch d.Code {
			case replay.CodeReplayStateRefused:
				out.refused = append(out.refused, refusal{seq: d.Seq, reportedAt: max(d.ReportedAt, d.Seq)})
			case replay.CodeInvalidReplayState:
				out.degraded[d.Seq] = string(d.Cause)
			}
		}
	}
	return out, nil
}

func printForkPoints(out io.Writer, turns []agenthost.Turn, found problems) error {
	w := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	fmt.Fprintln(w, "CUT\tTURN\tEND\tDEGRADED\tREFUSED\tUSER")
	keeps := false
	for _, t := range turns {
		cut, end, state, refused := "-", "open", "pending", "pending"
		if t.CutSeq >= 0 {
			cut, end = strconv.FormatInt(t.CutSeq, 10), string(t.Reason)
			if t.CutSeq <= found.through {
				state = turnDegraded(t, found.degraded)
				refused = found.refusedBy(t.CutSeq)
				keeps = keeps || refused != "no" && !found.dropped
			}
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", cut, t.Turn, end, state, refused, firstWords(t.UserText, 8, 60))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if keeps {
		_, err := fmt.Fprintln(out, "\nA child cut where REFUSED is not \"no\" sends thinking blocks the provider already refused, as pi does;\n"+
			"fork --refused-blocks=Drop leaves them out of its transcript.")
		return err
	}
	return nil
}

// refusedBy says how many blocks the provider had refused by a cut at
// seq cut — of messages the child holds, reported at or before the cut —
// and whether the Session leaves them out.
func (p problems) refusedBy(cut int64) string {
	n := 0
	for _, r := range p.refused {
		if r.reportedAt <= cut {
			n++
		}
	}
	switch {
	case n == 0:
		return "no"
	case p.dropped:
		return fmt.Sprintf("%d dropped", n)
	}
	return fmt.Sprintf("%d kept", n)
}

// turnDegraded is "no", or "yes (cause, ...)" for the causes of the
// degraded messages between the turn's start and its end.
func turnDegraded(t agenthost.Turn, degraded map[int64]string) string {
	var causes []string
	for seq := t.StartSeq; seq <= t.CutSeq; seq++ {
		if c, ok := degraded[seq]; ok && !slices.Contains(causes, c) {
			causes = append(causes, c)
		}
	}
	if len(causes) == 0 {
		return "no"
	}
	return "yes (" + strings.Join(causes, ", ") + ")"
}

// firstWords is text on one line, cut after words words or chars
// characters, with "…" when something was left out.
func firstWords(text string, words, chars int) string {
	fields := strings.Fields(text)
	cut := len(fields) > words
	if cut {
		fields = fields[:words]
	}
	s := strings.Join(fields, " ")
	if utf8.RuneCountInString(s) > chars {
		s, cut = string([]rune(s)[:chars]), true
	}
	if cut {
		s += "…"
	}
	if s == "" {
		return "-"
	}
	return s
}

func forkCommand(o *options) *cobra.Command {
	var at, name, refusedBlocks string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "fork SESSION --at SEQ [--name NAME]",
		Short: "Fork the Session at a seq: create a SessionFork, wait for its child, print the child and its cut",
		Long: `Create a SessionFork of SESSION at --at (a seq such as 41, or a frozen node
such as 40.1; fork-points lists the turns' cuts) and wait until the manager has
made the child Session: its log is the source's prefix through the first
turn/end at or after the seq. --name names the SessionFork and the child;
without it the API server picks SESSION-fork-XXXXX. --refused-blocks=Drop
gives a child whose transcript leaves out the thinking blocks the provider
refused (Keep: sends them again, as pi does; default: the source's choice).
A fork inside a turn that is still streaming waits for the turn to end.`,
		Args: oneSession,
		RunE: func(cmd *cobra.Command, args []string) error {
			if at == "" {
				return usageError{errors.New("--at is required: the seq to fork at, e.g. 41 or 40.1 (see fork-points)")}
			}
			if turnlog.CheckRefusedBlocks(refusedBlocks) != nil {
				return usageError{fmt.Errorf("--refused-blocks %q: want %s", refusedBlocks, strings.Join(turnlog.RefusedBlocksChoices, " or "))}
			}
			kube, ns, err := o.kube()
			if err != nil {
				return err
			}
			fork := &turnlogv1.SessionFork{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: turnlogv1.SessionForkSpec{
					Source: turnlogv1.SessionReference{Name: args[0]}, AtSeq: at,
					Target: turnlogv1.ForkTarget{Name: name, RefusedBlocks: refusedBlocks},
				},
			}
			if name == "" {
				fork.GenerateName = cmdkit.ForkGenerateName(args[0])
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			stderr := cmd.ErrOrStderr()
			err = agenthost.ForkSession(ctx, kube, fork, func(reason, message string) {
				fmt.Fprintf(stderr, "sessionfork/%s: waiting: %s: %s\n", fork.Name, reason, message)
			})
			if err != nil {
				return err
			}
			s := fork.Status
			fmt.Fprintf(cmd.OutOrStdout(), "sessionfork/%s: session/%s forked from %s at %s: cut at seq %d (turn %d, %s), anchor %d\n",
				fork.Name, s.ChildName, fork.Spec.Source.Name, fork.Spec.AtSeq, deref(s.CutSeq), deref(s.CutTurn), s.CutReason, deref(s.AnchorSeq))
			return nil
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "the seq to fork at (required), e.g. 41 or 40.1")
	cmd.Flags().StringVar(&name, "name", "", "name of the SessionFork and of the child Session (default: SESSION-fork-XXXXX)")
	cmd.Flags().StringVar(&refusedBlocks, "refused-blocks", "", "Drop: the child's transcript leaves out the thinking blocks the provider refused; Keep: it sends them again, as pi does (default: the source's choice)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the child; the SessionFork stays and completes without the wait")
	return cmd
}

func deref(v *int64) int64 {
	if v == nil {
		return -1
	}
	return *v
}
