package runner

import "time"

// Regression is a seed that found a bug, with the run's shape when it
// did: the schedule depends on the duration and the mean interval, and
// the timing on the clients and applies. Each bug also has a
// deterministic test (Test); a seed only makes its conditions likely.
type Regression struct {
	Name string
	// Seed, Duration, Every, Clients and ApplyEvery are the run's.
	Seed            uint64
	Duration, Every time.Duration
	Clients         int
	ApplyEvery      time.Duration
	// Found is what the seed found; Test the deterministic test of the
	// fix.
	Found, Test string
}

// Regressions are the chaos run's named regression seeds (xds-chaos
// --regressions; TestShortSeed runs the first in make test).
var Regressions = []Regression{
	{
		Name: "sotw-no-nonce-restart", Seed: 348, Duration: 30 * time.Second, Every: 2500 * time.Millisecond, Clients: 60, ApplyEvery: 300 * time.Millisecond,
		Found: "a SotW request without a nonce, sent before the first response of its type arrived, started the type over: the response was sent again at the same version (duplicate); " +
			"and a resuming delta load-tool client whose stream ended on one of its first sends lost its RDS subscription for good (not-converged)",
		Test: "internal/xds/sotw TestSotWRequests/requests_before_the_first_response_are_stale; internal/tools/loadgen TestDeltaResumeKeepsSubscriptions",
	},
	{
		Name: "sotw-no-nonce-names", Seed: 4, Duration: 2 * time.Minute, Every: 4 * time.Second, Clients: 300, ApplyEvery: 500 * time.Millisecond,
		Found: "taking the names of such a request at once (the first fix) resent an endpoint set re-added by the client at the version of the response already on its way (duplicate): such a request is now stale; " +
			"with canary rollouts, under etcd faults, canary nodes answered with the scope's resources at versions that held their overlay (half-apply): a stream answered for the latest running rollouts it knew, which lagged or led its snapshot; it now answers for those at its snapshot's revision",
		Test: "internal/xds/sotw TestSotWRequests/requests_before_the_first_response_are_stale; internal/xds/sotw TestCanaryHeldUntilRolloutsKnown; internal/state/rollout TestWatcherAt",
	},
	{
		Name: "delta-reconnect-system-version", Seed: 1, Duration: 2 * time.Minute, Every: 4 * time.Second, Clients: 300, ApplyEvery: 500 * time.Millisecond,
		Found: "the checker held a delta reconnect to the last system_version_info the client saw, which it never presents (backwards, a checker bug): it is now held to the newest resource version presented",
		Test:  "internal/tools/chaos TestCheckCatchesEachKind (delta reconnect below its last system version)",
	},
	{
		Name: "sotw-resume-applied-version", Seed: 6, Duration: 5 * time.Minute, Every: 4 * time.Second, Clients: 300, ApplyEvery: 500 * time.Millisecond,
		Found: "a resuming SotW load-tool client whose stream ended as it asked for the EDS names of a CDS response it had applied presented the CDS version before it, " +
			"and was answered below the version it had received (backwards; a bug of the tool: Envoy presents what it applied); and a compaction at a revision already compacted failed as a fault",
		Test: "internal/tools/loadgen TestResumePresentsWhatWasApplied; internal/tools/chaos/faults TestExecutorOnCluster (CompactEtcd twice)",
	},
}

// Config returns base shaped as the regression's run.
func (r Regression) Config(base Config) Config {
	base.Seed, base.Duration, base.Every, base.Clients, base.ApplyEvery = r.Seed, r.Duration, r.Every, r.Clients, r.ApplyEvery
	return base
}
