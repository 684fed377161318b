package xdstest

// StuckScale is the stuck-client check at full size: 999
// normal clients and 2,000 endpoint updates. Run with -tags e2e, e.g.
// go test -tags e2e -run StuckClient ./internal/xds/sotw ./internal/xds/delta ./internal/cluster/relay.
var StuckScale = StuckSize{Normal: 999, Updates: 2000}
