// Command dev runs turnlog on a laptop without a cluster: it starts a local
// control plane (etcd + kube-apiserver built by hack/controlplane.sh) whose
// state persists under --state-dir, installs the CRDs, writes a kubeconfig
// and prints the commands to use it. Ctrl-C stops everything.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "turnlog dev:", err)
		os.Exit(1)
	}
}

func run() error {
	stateDirFlag := flag.String("state-dir", ".turnlog-dev", "directory for etcd data and the kubeconfig; kept across runs")
	controlPlane := flag.String("control-plane", "", "directory holding etcd, kube-apiserver and kubectl (make control-plane)")
	crds := flag.String("crds", "config/crd/bases", "directory of CRD manifests to install")
	flag.Parse()

	stateDir, err := filepath.Abs(*stateDirFlag)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(*controlPlane, "kube-apiserver")); err != nil {
		return fmt.Errorf("no kube-apiserver in --control-plane %q: run `make control-plane` first", *controlPlane)
	}
	etcdDir := filepath.Join(stateDir, "etcd")
	if err := os.MkdirAll(etcdDir, 0o700); err != nil {
		return err
	}

	env := &envtest.Environment{
		BinaryAssetsDirectory: *controlPlane,
		CRDDirectoryPaths:     []string{*crds},
		ErrorIfCRDPathMissing: true,
	}
	// etcd's data lives in the state dir so Sessions survive a restart.
	env.ControlPlane.Etcd = &envtest.Etcd{DataDir: etcdDir}

	fmt.Println("starting the local control plane (etcd + kube-apiserver) ...")
	if _, err := env.Start(); err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() {
		fmt.Println("stopping the control plane ...")
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "turnlog dev: stopping:", err)
		}
	}()

	admin, err := env.AddUser(envtest.User{Name: "turnlog-dev", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("creating the admin user: %w", err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	kubeconfigPath := filepath.Join(stateDir, "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		return err
	}

	fmt.Printf(`
turnlog dev is running. In another shell:

  export KUBECONFIG=%s
  export PATH=%s:$PATH
  kubectl get crds
  kubectl apply -f config/samples/
  kubectl get sessions,sessionforks

Press Ctrl-C to stop; state is kept in %s.
`, kubeconfigPath, *controlPlane, stateDir)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}
