package ui

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
)

// sessionView is what the pages show of a Session: its status summary,
// never its spec's storage or its status's location.
type sessionView struct {
	Namespace    string             `json:"namespace"`
	Name         string             `json:"name"`
	Labels       map[string]string  `json:"labels,omitempty"`
	Ready        string             `json:"ready"`
	Reason       string             `json:"reason,omitempty"`
	Message      string             `json:"message,omitempty"`
	Head         *int64             `json:"head,omitempty"`
	Turns        int64              `json:"turns"`
	Context      *int64             `json:"context,omitempty"`
	Degraded     int64              `json:"degraded"`
	Causes       []cmdkit.CauseSeqs `json:"causes"`
	MoreDegraded int64              `json:"moreDegraded,omitempty"`
	// Refused counts the blocks the provider refused (status.replay.refused,
	// every reason but unmapped); Dropped those the transcript leaves out.
	Refused    int64           `json:"refused,omitempty"`
	Dropped    int64           `json:"dropped,omitempty"`
	ThroughSeq *int64          `json:"throughSeq,omitempty"`
	ForkedFrom *forkOriginView `json:"forkedFrom,omitempty"`
	Adapter    string          `json:"adapter,omitempty"`
	Version    string          `json:"version"`
	// LastUser is the start of the last user message, sent when the list
	// is searched by it.
	LastUser string `json:"lastUser,omitempty"`
}

type forkOriginView struct {
	Session   string `json:"session"`
	Fork      string `json:"fork,omitempty"`
	AnchorSeq int64  `json:"anchorSeq"`
	CutSeq    int64  `json:"cutSeq"`
}

func viewSession(s *turnlogv1.Session) sessionView {
	v := sessionView{Namespace: s.Namespace, Name: s.Name, Labels: s.Labels, Ready: "Unknown", Head: s.Status.HeadSeq, Turns: s.Status.Turns,
		Causes: []cmdkit.CauseSeqs{}, Version: s.ResourceVersion}
	if c := meta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady); c != nil {
		v.Ready, v.Reason, v.Message = string(c.Status), c.Reason, c.Message
	}
	if r := s.Status.Replay; r != nil {
		v.Context, v.Degraded, v.ThroughSeq = &r.ContextMessages, r.Degraded, &r.ThroughSeq
		v.Causes = cmdkit.DegradedCauses(r.DegradedSeqs)
		listed := int64(0)
		for _, c := range v.Causes {
			listed += int64(len(c.Seqs))
		}
		v.MoreDegraded = max(0, r.Degraded-listed)
		c := r.Refused
		v.Refused = c.PrefixBindingMismatch + c.ModelBindingMismatch + c.OrganizationBindingMismatch + c.EndUserBindingMismatch + c.Other
		v.Dropped = c.Dropped
	}
	if f := s.Spec.ForkedFrom; f != nil {
		v.ForkedFrom = &forkOriginView{Session: f.Session, Fork: f.Fork, AnchorSeq: f.AnchorSeq, CutSeq: f.CutSeq}
	}
	if a := s.Spec.Adapter; a != (turnlogv1.Adapter{}) {
		v.Adapter = a.Kind + " " + a.API + "/" + a.Provider + "/" + a.Model
		if a.ReleaseLine != "" {
			v.Adapter += " (release line " + a.ReleaseLine + ")"
		}
	}
	return v
}

// forkView is a SessionFork as the pages follow it: Waiting until it
// settles, then Succeeded with its child or Failed with the reason.
type forkView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Source    string `json:"source"`
	AtSeq     string `json:"atSeq"`
	Phase     string `json:"phase"`
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message,omitempty"`
	Child     string `json:"child,omitempty"`
	ChildOK   bool   `json:"childReady"`
	AnchorSeq *int64 `json:"anchorSeq,omitempty"`
	CutSeq    *int64 `json:"cutSeq,omitempty"`
	CutTurn   *int64 `json:"cutTurn,omitempty"`
	CutReason string `json:"cutReason,omitempty"`
}

func viewFork(f *turnlogv1.SessionFork) forkView {
	v := forkView{Namespace: f.Namespace, Name: f.Name, Source: f.Spec.Source.Name, AtSeq: f.Spec.AtSeq, Phase: "Waiting",
		AnchorSeq: f.Status.AnchorSeq, CutSeq: f.Status.CutSeq, CutTurn: f.Status.CutTurn, CutReason: f.Status.CutReason}
	if c := meta.FindStatusCondition(f.Status.Conditions, turnlogv1.ConditionSucceeded); c != nil {
		v.Reason, v.Message = c.Reason, c.Message
		switch c.Status {
		case metav1.ConditionTrue:
			v.Phase, v.Child = "Succeeded", f.Status.ChildName
		case metav1.ConditionFalse:
			v.Phase = "Failed"
		}
	}
	return v
}

// eventView is one Event, as `kubectl turnlog events` prints it.
type eventView struct {
	LastSeen time.Time `json:"lastSeen"`
	Type     string    `json:"type"`
	Reason   string    `json:"reason"`
	Object   string    `json:"object"`
	Message  string    `json:"message"`
	// Seq is the log seq the Event is about (its field path log[SEQ]),
	// -1 for the Session as a whole.
	Seq int64 `json:"seq"`
}

// messagePath is the field path of an Event about one message of a log.
var messagePath = regexp.MustCompile(`^log\[(\d+)\]$`)

func viewEvent(e corev1.Event) eventView {
	v := eventView{LastSeen: cmdkit.LastSeen(e), Type: e.Type, Reason: e.Reason, Message: e.Message, Seq: -1,
		Object: e.InvolvedObject.Kind + "/" + e.InvolvedObject.Name}
	if m := messagePath.FindStringSubmatch(e.InvolvedObject.FieldPath); m != nil {
		v.Seq, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return v
}

// treeNode is one Session of a fork tree.
type treeNode struct {
	Name      string      `json:"name"`
	Ready     string      `json:"ready"`
	CutSeq    *int64      `json:"cutSeq,omitempty"`
	AnchorSeq *int64      `json:"anchorSeq,omitempty"`
	Current   bool        `json:"current,omitempty"`
	Missing   bool        `json:"missing,omitempty"` // a parent that is gone or cannot be read
	Children  []*treeNode `json:"children"`
}

// maxTreeDepth bounds how far up and down a fork tree is followed.
const maxTreeDepth = 32

// forkTree is the Session's ancestors, from the oldest, down to the
// Session, and all its descendants below it, among sessions (the
// Sessions of its namespace the user can list).
func forkTree(current *turnlogv1.Session, sessions []turnlogv1.Session) *treeNode {
	byName := map[string]*turnlogv1.Session{}
	children := map[string][]*turnlogv1.Session{}
	for i := range sessions {
		s := &sessions[i]
		byName[s.Name] = s
		if f := s.Spec.ForkedFrom; f != nil {
			children[f.Session] = append(children[f.Session], s)
		}
	}
	node := func(s *turnlogv1.Session) *treeNode {
		n := &treeNode{Name: s.Name, Ready: viewSession(s).Ready, Children: []*treeNode{}}
		if f := s.Spec.ForkedFrom; f != nil {
			n.CutSeq, n.AnchorSeq = &f.CutSeq, &f.AnchorSeq
		}
		return n
	}
	var below func(s *turnlogv1.Session, depth int) *treeNode
	below = func(s *turnlogv1.Session, depth int) *treeNode {
		n := node(s)
		if depth < maxTreeDepth {
			for _, c := range children[s.Name] {
				if isChildOf(c, s) {
					n.Children = append(n.Children, below(c, depth+1))
				}
			}
		}
		return n
	}
	top := below(current, 0)
	top.Current = true
	seen := map[string]bool{current.Name: true}
	for s, depth := current, 0; s.Spec.ForkedFrom != nil && depth < maxTreeDepth; depth++ {
		name := s.Spec.ForkedFrom.Session
		parent, ok := byName[name]
		if seen[name] || !ok || !isChildOf(s, parent) {
			top = &treeNode{Name: name, Missing: true, Children: []*treeNode{top}}
			break
		}
		seen[name] = true
		n := node(parent)
		n.Children = []*treeNode{top}
		top, s = n, parent
	}
	return top
}

// isChildOf reports whether child was forked from parent, and not from an
// earlier Session of the same name.
func isChildOf(child, parent *turnlogv1.Session) bool {
	f := child.Spec.ForkedFrom
	return f != nil && f.Session == parent.Name && (f.UID == "" || f.UID == string(parent.UID))
}

// httpStatus is the status to answer with for an error of the API server.
func httpStatus(err error) int {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code != 0 {
		return int(status.Status().Code)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// sessionsIn lists the Sessions of namespace ("" for all namespaces).
func sessionsIn(ctx context.Context, kube client.Client, namespace string) (*turnlogv1.SessionList, error) {
	list := &turnlogv1.SessionList{}
	var opts []client.ListOption
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	return list, kube.List(ctx, list, opts...)
}
