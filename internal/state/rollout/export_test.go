package rollout

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DelayWatch makes w's watches begin only once gate is closed, so that
// what was written meanwhile arrives as a watch catching up gets it:
// several revisions in one response. Call it before Run.
func DelayWatch(w *Watcher, gate <-chan struct{}) { w.w = gatedWatcher{Watcher: w.w, gate: gate} }

type gatedWatcher struct {
	clientv3.Watcher
	gate <-chan struct{}
}

func (g gatedWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	select {
	case <-g.gate:
	case <-ctx.Done():
	}
	return g.Watcher.Watch(ctx, key, opts...)
}
