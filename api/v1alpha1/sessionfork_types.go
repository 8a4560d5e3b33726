package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SessionReference names a Session in the SessionFork's namespace.
type SessionReference struct {
	// Name of the Session.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ForkTarget shapes the child Session a fork creates.
type ForkTarget struct {
	// Name of the child Session; defaults to the SessionFork's name.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="target.name must be a lowercase DNS subdomain, e.g. \"support-chat-retry\""
	// +optional
	Name string `json:"name,omitempty"`
	// Labels added to the child Session: Kubernetes label keys and values
	// (turnlog.dev/fork and turnlog.dev/fork-source are set by the
	// controller).
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$') && size(k.split('/')[size(k.split('/'))-1]) <= 63 && (size(k.split('/')) == 1 || size(k.split('/')[0]) <= 253))",message="target.labels keys must be Kubernetes label keys: an optional DNS subdomain prefix (at most 253 characters) and '/', then a name of at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
	// +optional
	Labels map[string]LabelValue `json:"labels,omitempty"`
	// RefusedBlocks sets the child's spec.adapter.refusedBlocks; the
	// source's when empty. "Drop" gives a child whose transcript leaves
	// out the thinking blocks the provider refused before the cut.
	// +kubebuilder:validation:Enum=Keep;Drop
	// +optional
	RefusedBlocks string `json:"refusedBlocks,omitempty"`
}

// LabelValue is a Kubernetes label value.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:XValidation:rule="self.matches('^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$')",message="target.labels values must be Kubernetes label values: at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric, or empty"
type LabelValue string

// SessionForkSpec is the desired fork. It is immutable: to fork elsewhere,
// create another SessionFork.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="SessionFork spec is immutable; create a new SessionFork to fork at another point"
type SessionForkSpec struct {
	// Source is the Session to fork.
	Source SessionReference `json:"source"`
	// AtSeq is where to fork, as a non-negative decimal string. A fraction
	// is floored, so a UI's frozen node at "41.1" forks at seq 41; the child
	// is seeded through the first turn/end at or after that seq.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]{1,19}([.][0-9]{1,40})?$') && (size(self.split('.')[0]) < 19 || self.split('.')[0] <= '9223372036854775807')",message="atSeq must be a non-negative decimal such as \"41\" or \"41.1\": an integer part of at most 19 digits and at most 9223372036854775807, an optional fraction of at most 40 digits, no sign, exponent, spaces or NaN"
	AtSeq string `json:"atSeq"`
	// Target shapes the child Session.
	// +optional
	Target ForkTarget `json:"target,omitempty"`
}

// SessionForkStatus is the outcome of a fork.
type SessionForkStatus struct {
	// ObservedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// AnchorSeq is atSeq floored to an event seq.
	// +optional
	AnchorSeq *int64 `json:"anchorSeq,omitempty"`
	// CutSeq is the seq of the first turn/end at or after the anchor.
	// +optional
	CutSeq *int64 `json:"cutSeq,omitempty"`
	// CutTurn is the turn the cut closes.
	// +optional
	CutTurn *int64 `json:"cutTurn,omitempty"`
	// CutReason is how the cut turn ended (stop, length, toolUse, error, aborted).
	// +kubebuilder:validation:MaxLength=32
	// +optional
	CutReason string `json:"cutReason,omitempty"`
	// ChildName is the Session the fork created.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ChildName string `json:"childName,omitempty"`
	// Prefix says how the child holds the source's events through the
	// cut: Referenced, the child refers to the source's segments and holds
	// only the segment with the cut (docs/log-format.md, "Forks by
	// reference"); Copied, the child holds a copy, for the reason the
	// Succeeded condition gives.
	// +kubebuilder:validation:Enum=Referenced;Copied
	// +optional
	Prefix string `json:"prefix,omitempty"`
	// Conditions: Succeeded (Unknown while in progress, then True or False).
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SessionFork materialises a new Session whose log is a prefix of another
// Session's log, cut through a whole turn.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sfork,categories=turnlog
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.source.name`
// +kubebuilder:printcolumn:name="At",type=string,JSONPath=`.spec.atSeq`
// +kubebuilder:printcolumn:name="Cut",type=integer,JSONPath=`.status.cutSeq`
// +kubebuilder:printcolumn:name="Child",type=string,JSONPath=`.status.childName`
// +kubebuilder:printcolumn:name="Prefix",type=string,JSONPath=`.status.prefix`
// +kubebuilder:printcolumn:name="Succeeded",type=string,JSONPath=`.status.conditions[?(@.type=="Succeeded")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SessionFork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   SessionForkSpec   `json:"spec"`
	Status SessionForkStatus `json:"status,omitempty"`
}

// SessionForkList is a list of SessionForks.
// +kubebuilder:object:root=true
type SessionForkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SessionFork `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SessionFork{}, &SessionForkList{})
}
