// Package soak runs turnlog under sustained load while things fail
// together: agent hosts (processes written on agenthost) stream turns into
// many Sessions, the harness forks and nudges them, and on a schedule the
// manager is SIGKILLed, versitygw is killed, slowed and made to drop
// connections, a second store (a third of the Sessions and hosts) is down
// for minutes while the first one's Sessions are measured, worker pods and
// Jobs are deleted and hosts are killed mid response. A checker then says
// what a user would notice: acknowledged events lost or written twice, logs
// that do not validate, transcripts that differ from an offline replay,
// forks that are not exact prefixes, Sessions that never settle, Event
// storms and a growing manager.
//
// TestSoak skips unless -soak.duration is set; `make soak` runs a long one
// and `make test-soak` (part of `make test`) a short one. The results are in
// docs/reliability.md.
package soak
