package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/sessionlog"
)

// writeManifest keeps the Session's manifest beside its log
// (sessionio.Manifest): written when the Session is first seen and again
// whenever its spec, labels or lineage change, which status.manifest
// tells without reading the store. A Session that `turnlog adopt` pointed
// at an earlier log (spec.storage.logUID) also drops the manifest it
// wrote in its own root before that, when that is all the root holds, so
// that the root is not found again as a Session of its own.
func (r *SessionReconciler) writeManifest(ctx context.Context, s *sessionScope, lg *sessionlog.Log) error {
	data, err := sessionio.Manifest(s.session)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:16])
	if s.session.Status.Manifest == digest {
		return nil
	}
	if wait := r.handoverWait(s.session.UID); wait > 0 {
		// The shard the Session came from may still be writing under its
		// root; nothing is written there until that has stopped.
		s.result.RequeueAfter = soonest(s.result.RequeueAfter, wait)
		return nil
	}
	if err := lg.PutManifest(ctx, data); err != nil {
		return fmt.Errorf("write the Session's manifest beside its log: %w", err)
	}
	if s.session.LogUID() != string(s.session.UID) {
		own := s.location
		own.UID = string(s.session.UID)
		if ownLog, err := s.store.Logs.Log(own); err == nil {
			if dropped, err := ownLog.DeleteManifestIfAlone(ctx); err != nil {
				log.FromContext(ctx).Error(err, "dropping the manifest of the Session's own root, which spec.storage.logUID no longer uses")
			} else if dropped {
				log.FromContext(ctx).Info("dropped the manifest of the Session's own root: its log is at spec.storage.logUID", "root", own.String())
			}
		}
	}
	s.session.Status.Manifest = digest
	return nil
}
