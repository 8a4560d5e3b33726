// Package controllers holds the Session and SessionFork reconcilers. They
// orchestrate only: the log format, assembly, replay and the fork cut live
// in Kubernetes-free packages under internal/, and the work itself runs in
// worker Jobs.
package controllers

// The manager's permissions, generated into config/rbac/role.yaml; each
// controller file declares what it uses.
//
// The SessionFork controller creates child Sessions and nudges them.
// +kubebuilder:rbac:groups=turnlog.dev,resources=sessions,verbs=create
