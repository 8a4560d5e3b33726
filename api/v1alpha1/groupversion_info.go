// Package v1alpha1 holds the turnlog.dev/v1alpha1 API: Session, one agent
// conversation whose turn log lives in object storage, and SessionFork, a
// request to materialise a new Session from a prefix of another one's log.
//
// +kubebuilder:object:generate=true
// +groupName=turnlog.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of every turnlog kind.
	GroupVersion = schema.GroupVersion{Group: "turnlog.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the turnlog kinds with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the turnlog kinds to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
