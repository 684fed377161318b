package status

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// grant grants a new lease and starts keeping it alive until Run ends or
// the lease is lost.
func (w *Writer) grant(ctx context.Context) error {
	ttl := int64((w.cfg.LeaseTTL + time.Second - 1) / time.Second)
	tctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseTTL)
	g, err := w.cfg.Client.Grant(tctx, ttl)
	cancel()
	if err != nil {
		return fmt.Errorf("status: grant lease: %w", err)
	}
	kctx, stop := context.WithCancel(ctx)
	ka, err := w.cfg.Client.KeepAlive(kctx, g.ID)
	if err != nil {
		stop()
		w.revoke(g.ID) //nolint:errcheck // unused; it expires anyway
		return fmt.Errorf("status: keep lease alive: %w", err)
	}
	w.lease, w.ka, w.kaStop = g.ID, ka, stop
	clear(w.written) // nothing is under the new lease yet
	w.log.Debug("status: lease granted", "lease", fmt.Sprintf("%016x", int64(g.ID)), "ttl_seconds", g.TTL)
	return nil
}

// lost drops a lease that etcd lost (it expired while out of reach), so
// that the next round grants another and writes every record again. The
// records under the old lease are gone or expire with it.
func (w *Writer) lost(why string) {
	if w.lease == 0 {
		return
	}
	w.log.Warn("status: lease lost; writing every record again under a new one", "why", why,
		"lease", fmt.Sprintf("%016x", int64(w.lease)))
	w.kaStop()
	w.lease, w.ka, w.kaStop = 0, nil, nil
	clear(w.written)
	w.quiet = false // every record is to be written again
	w.metrics.leaseLost.Inc()
	w.metrics.held.Set(0)
}

// stop revokes the lease, deleting every record written under it.
func (w *Writer) stop() error {
	if w.lease == 0 {
		return nil
	}
	w.kaStop()
	id := w.lease
	w.lease, w.ka, w.kaStop = 0, nil, nil
	clear(w.written)
	w.metrics.held.Set(0)
	if err := w.revoke(id); err != nil {
		return err
	}
	w.log.Debug("status: lease revoked; records deleted")
	return nil
}

func (w *Writer) revoke(id clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(context.Background(), min(w.cfg.LeaseTTL, 5*time.Second))
	defer cancel()
	if _, err := w.cfg.Client.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("status: revoke lease %016x: %w", int64(id), err)
	}
	return nil
}
