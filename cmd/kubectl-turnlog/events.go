package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
)

func eventsCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "events SESSION",
		Short: "List the Events of the Session and of the SessionForks made from it, oldest first",
		Long: `List the Events about SESSION (ReplayDegraded, WorkerFailed, Assembled, ...)
and about the SessionForks whose source it is (Forked, ForkFailed), oldest
first. Events expire after an hour; the Session's status keeps the counts.`,
		Args: oneSession,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			kube, ns, err := o.kube()
			if err != nil {
				return err
			}
			if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: args[0]}, &turnlogv1.Session{}); err != nil {
				return fmt.Errorf("Session %s/%s: %w", ns, args[0], err)
			}
			events, err := cmdkit.SessionEvents(ctx, kube, ns, args[0])
			if err != nil {
				return err
			}
			if len(events) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "No Events for Session %s/%s (they expire after an hour).\n", ns, args[0])
				return nil
			}
			return printEvents(cmd.OutOrStdout(), events, time.Now())
		},
	}
}

func printEvents(out io.Writer, events []corev1.Event, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	fmt.Fprintln(w, "LAST SEEN\tTYPE\tREASON\tOBJECT\tMESSAGE")
	for _, e := range events {
		object := strings.ToLower(e.InvolvedObject.Kind) + "/" + e.InvolvedObject.Name
		message := strings.Join(strings.Fields(e.Message), " ")
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", duration.HumanDuration(now.Sub(cmdkit.LastSeen(e))), e.Type, e.Reason, object, message)
	}
	return w.Flush()
}
