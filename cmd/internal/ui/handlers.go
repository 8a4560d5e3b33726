package ui

import (
	"fmt"
	"net/http"
	"regexp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/cmd/internal/cmdkit"
)

// sessionPage is what the Session page shows beside its conversation,
// which it reads a window at a time (turns).
type sessionPage struct {
	Session sessionView `json:"session"`
	Events  []eventView `json:"events"`
	// EventsError says why the Events could not be listed.
	EventsError string     `json:"eventsError,omitempty"`
	Forks       []forkView `json:"forks"`
	Tree        *treeNode  `json:"tree"`
}

func (s *Server) session(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	session := &turnlogv1.Session{}
	if err := s.opts.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, session); err != nil {
		writeError(w, httpStatus(err), fmt.Errorf("Session %s/%s: %w", ns, name, err))
		return
	}
	page := sessionPage{Session: viewSession(session), Forks: []forkView{}}
	page.Events, page.EventsError = s.sessionEvents(ctx, ns, name)
	forks := &turnlogv1.SessionForkList{}
	if err := s.opts.Kube.List(ctx, forks, client.InNamespace(ns)); err == nil {
		for i := range forks.Items {
			if forks.Items[i].Spec.Source.Name == name {
				page.Forks = append(page.Forks, viewFork(&forks.Items[i]))
			}
		}
	}
	// The tree shows the Sessions the user can list; without that right,
	// the Session alone.
	family := []turnlogv1.Session{*session}
	if list, err := sessionsIn(ctx, s.opts.Kube, ns); err == nil {
		family = list.Items
	}
	page.Tree = forkTree(session, family)
	writeJSON(w, http.StatusOK, page)
}

// forkRequest is the body of a fork action.
type forkRequest struct {
	AtSeq string `json:"atSeq"`
	Name  string `json:"name"`
}

// atSeqPattern is SessionFork's atSeq: a non-negative decimal.
var atSeqPattern = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

func (s *Server) createFork(w http.ResponseWriter, r *http.Request) {
	if err := s.sameOrigin(r); err != nil {
		writeError(w, http.StatusForbidden, err)
		return
	}
	var req forkRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if !atSeqPattern.MatchString(req.AtSeq) {
		writeError(w, http.StatusBadRequest, fmt.Errorf("atSeq %q: want a non-negative decimal such as 41 or 40.1", req.AtSeq))
		return
	}
	ns, source := r.PathValue("namespace"), r.PathValue("name")
	fork := &turnlogv1.SessionFork{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: req.Name},
		Spec: turnlogv1.SessionForkSpec{Source: turnlogv1.SessionReference{Name: source}, AtSeq: req.AtSeq,
			Target: turnlogv1.ForkTarget{Name: req.Name}},
	}
	if req.Name == "" {
		fork.GenerateName = cmdkit.ForkGenerateName(source)
	}
	if err := s.opts.Kube.Create(r.Context(), fork); err != nil {
		writeError(w, httpStatus(err), fmt.Errorf("create SessionFork of %s at %s: %w", source, req.AtSeq, err))
		return
	}
	writeJSON(w, http.StatusCreated, viewFork(fork))
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	fork := &turnlogv1.SessionFork{}
	key := client.ObjectKey{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	if err := s.opts.Kube.Get(ctx, key, fork); err != nil {
		writeError(w, httpStatus(err), fmt.Errorf("SessionFork %s: %w", key, err))
		return
	}
	v := viewFork(fork)
	if v.Child != "" {
		child := &turnlogv1.Session{}
		if err := s.opts.Kube.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: v.Child}, child); err == nil {
			v.ChildOK = viewSession(child).Ready == "True"
		}
	}
	writeJSON(w, http.StatusOK, v)
}
