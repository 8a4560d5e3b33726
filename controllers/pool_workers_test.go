package controllers

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// What a Session waiting for a worker pod says when the namespace's pods
// cannot take runs.
func TestPodTrouble(t *testing.T) {
	labels := poolLabels
	pod := func(name string, status corev1.PodStatus) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Labels: labels}, Status: status}
	}
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want string
	}{
		{"no pod", nil, "no worker pod exists yet"},
		{"starting", []*corev1.Pod{pod("w-1", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}})}, ""},
		{"image", []*corev1.Pod{pod("w-1", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "turnlog:nope"`}}}}})},
			`pod w-1: ImagePullBackOff: Back-off pulling image "turnlog:nope"`},
		{"crash loop", []*corev1.Pod{pod("w-1", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}}})},
			"pod w-1: CrashLoopBackOff (last exit 137, OOMKilled)"},
		{"unschedulable", []*corev1.Pod{pod("w-1", corev1.PodStatus{Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/3 nodes are available: 3 Insufficient memory."}}})},
			"pod w-1 is not scheduled: 0/3 nodes are available: 3 Insufficient memory."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(scheme.Scheme)
			for _, p := range tc.pods {
				b = b.WithObjects(p)
			}
			w := &PoolWorkers{Reader: b.Build()}
			got := w.podTrouble(context.Background(), "team-a")
			if tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(got, tc.want) {
				t.Errorf("podTrouble = %q, want %q", got, tc.want)
			}
		})
	}
}
