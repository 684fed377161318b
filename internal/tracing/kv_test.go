package tracing

import clientv3 "go.etcd.io/etcd/client/v3"

// nopKV stands for the etcd client in tests of Pushes that never read
// markers (they set the pending pushes themselves).
type nopKV struct{ clientv3.KV }
