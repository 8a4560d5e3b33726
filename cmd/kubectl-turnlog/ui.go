package main

import (
	"net"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/turnlog/turnlog/agenthost"
	"github.com/turnlog/turnlog/cmd/internal/ui"
)

func uiCommand(o *options) *cobra.Command {
	var address string
	var port int
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve a web page on 127.0.0.1 that shows Sessions, compares them and forks them from any message",
		Long: `Serve turnlog's web page from this process, with your kubeconfig and store
credentials: the Sessions you can list (updated live, searched by name,
label, readiness, marks and last user message), each Session's stored
transcript with its degraded messages and the frozen text of stopped
responses, its Events, its SessionForks and fork tree, a fork action on
every message, and two Sessions of a fork tree compared side by side from
where they part. Without --store-url the pages show no transcript.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kube, ns, err := o.kube()
			if err != nil {
				return err
			}
			var st *agenthost.Store
			if o.store.URL != "" {
				if st, err = o.store.Open(cmd.Context()); err != nil {
					return usageError{err}
				}
				defer st.Close()
			}
			addr := net.JoinHostPort(address, strconv.Itoa(port))
			return ui.Run(cmd.Context(), addr, ui.Options{Kube: kube, Namespace: ns, Store: st}, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "address to listen on; anything but loopback lets others act with your credentials")
	cmd.Flags().IntVar(&port, "port", 8765, "port to listen on (0: any free port)")
	return cmd
}
