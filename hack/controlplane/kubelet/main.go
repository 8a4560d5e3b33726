// Command kubelet runs the local cluster's real node: it starts pods as
// containers through containerd and runc.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // the JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() { os.Exit(cli.Run(app.NewKubeletCommand(context.Background()))) }
