package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
	"github.com/turnlog/turnlog/internal/sessionio"
)

func sessionsCommand(o *options) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List Sessions: readiness, head, turns, context size, degraded messages and their causes, refused blocks",
		Long: `List the Sessions of the namespace (or of all with -A) from their status:
READY (and why not), HEAD, TURNS, CONTEXT (the messages the next request is
built from), DEGRADED (messages replayed provider-neutral because their
replay state was unusable), CAUSES (the degraded seqs by cause: kind,
version, malformed, shape; status keeps the first 20 of each) and REFUSED
(thinking blocks the provider refused, kept as pi keeps them or dropped by
spec.adapter.refusedBlocks, with the seqs of the messages that carry them).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kube, ns, err := o.kube()
			if err != nil {
				return err
			}
			var opts []client.ListOption
			if !all {
				opts = append(opts, client.InNamespace(ns))
			}
			list := &turnlogv1.SessionList{}
			if err := kube.List(cmd.Context(), list, opts...); err != nil {
				return err
			}
			if len(list.Items) == 0 {
				where := "in namespace " + ns
				if all {
					where = "in any namespace"
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "No Sessions %s.\n", where)
				return nil
			}
			return printSessions(cmd.OutOrStdout(), list.Items, all)
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list the Sessions of every namespace")
	return cmd
}

func printSessions(out io.Writer, sessions []turnlogv1.Session, withNamespace bool) error {
	w := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	header := "NAME\tREADY\tHEAD\tTURNS\tCONTEXT\tDEGRADED\tCAUSES\tREFUSED"
	if withNamespace {
		header = "NAMESPACE\t" + header
	}
	fmt.Fprintln(w, header)
	for _, s := range sessions {
		row := []string{s.Name, ready(&s), optional(s.Status.HeadSeq), strconv.FormatInt(s.Status.Turns, 10), "-", "-", "-", "-"}
		if r := s.Status.Replay; r != nil {
			row[4] = strconv.FormatInt(r.ContextMessages, 10)
			row[5] = strconv.FormatInt(r.Degraded, 10)
			row[6] = causes(r)
			row[7] = refused(r)
		}
		if withNamespace {
			row = append([]string{s.Namespace}, row...)
		}
		fmt.Fprintln(w, strings.Join(row, "\t"))
	}
	return w.Flush()
}

// ready is the Ready condition's status, and its reason when it is not
// True: what an operator looks at first.
func ready(s *turnlogv1.Session) string {
	c := meta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady)
	switch {
	case c == nil:
		return "Unknown"
	case c.Status == metav1.ConditionTrue:
		return "True"
	default:
		return string(c.Status) + " (" + c.Reason + ")"
	}
}

func optional(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}

// causes lists the degraded seqs by cause, "version:3 kind:7,15", and how
// many more there are than status keeps.
func causes(r *turnlogv1.ReplaySummary) string {
	var parts []string
	listed := 0
	for _, c := range cmdkit.DegradedCauses(r.DegradedSeqs) {
		seqs := make([]string, len(c.Seqs))
		for i, s := range c.Seqs {
			seqs[i] = strconv.FormatInt(s, 10)
		}
		listed += len(c.Seqs)
		parts = append(parts, c.Cause+":"+strings.Join(seqs, ","))
	}
	if more := r.Degraded - int64(listed); more > 0 {
		parts = append(parts, fmt.Sprintf("(+%d more)", more))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// refused is the refused blocks, "2 kept (3,7)" or "2 dropped (3,7)", with
// the seqs of their messages (status keeps the first 20 of each reason),
// and the refusals replay could not map: "1 unmapped".
func refused(r *turnlogv1.ReplaySummary) string {
	c, s := r.Refused, r.RefusedSeqs
	n := c.PrefixBindingMismatch + c.ModelBindingMismatch + c.OrganizationBindingMismatch + c.EndUserBindingMismatch + c.Other
	var parts []string
	if n > 0 {
		seqs := slices.Concat(s.PrefixBindingMismatch, s.ModelBindingMismatch, s.OrganizationBindingMismatch, s.EndUserBindingMismatch, s.Other)
		slices.Sort(seqs)
		listed := make([]string, 0, len(seqs))
		for _, seq := range slices.Compact(seqs) {
			listed = append(listed, strconv.FormatInt(seq, 10))
		}
		how := "kept"
		if sessionio.Target(r.Adapter).DropsRefused() {
			how = "dropped"
		}
		parts = append(parts, fmt.Sprintf("%d %s (%s)", n, how, strings.Join(listed, ",")))
	}
	if c.Unmapped > 0 {
		parts = append(parts, fmt.Sprintf("%d unmapped", c.Unmapped))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
